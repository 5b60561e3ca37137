"""Run the paper-reproduction suite and write its report (``--markdown``; the committed one
is ``benchmarks/results/REPORT.md``).

::

    .venv/bin/python benchmarks/run_all.py [--quick] [--real-engine] --out benchmarks/results \
        --markdown benchmarks/results/REPORT.md                 # the committed results
    .venv/bin/python benchmarks/run_all.py --only fig2_oracle,bias_check
    .venv/bin/python benchmarks/run_all.py --out benchmarks/results \
        --markdown benchmarks/results/REPORT.md --report-only   # rewrite the committed report only

Each item lives in ``benchmarks/paper/<name>.py`` with ``run(out_dir, quick) -> dict`` and
writes ``<out>/paper/<name>.json`` and ``.png``. ``--real-engine`` also runs
``benchmarks/bench_real_engine.py`` (two vLLM CPU servers), which writes
``<out>/real_engine/real_engine.json`` and ``real_engine.md``; without it an existing result is
embedded. ``--out`` defaults to a folder under the system temp dir and ``--markdown`` to
``<out>/REPORT.md``: nothing is written inside the repository unless named.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

MODULES: tuple[str, ...] = (
    "fig2_oracle",
    "fig3_capture",
    "fig4_landscape",
    "fig6b_convergence",
    "tables_policies",
    "protocol_ceiling",
    "spread_ablation",
    "spec_budget",
    "drift",
    "bias_check",
)


# --smoke: each item at the smallest shape that runs its code path (seconds; the test suite's
# check that the suite still runs)
SMOKE: dict[str, dict[str, Any]] = {
    "fig2_oracle": {"draws": 2, "num_requests": 30},
    "fig3_capture": {"rounds": 3},
    "fig4_landscape": {"steps": 4, "q_grid": (2, 8)},
    "fig6b_convergence": {"steps": 4},
    "tables_policies": {"steps": 3, "seeds": (0,), "sizes": (16,), "workloads": ("paper-math",),
                        "profiles": ("qwen3-4b-h100",)},
    "protocol_ceiling": {"steps": 3, "seeds": (0,), "workloads": ("paper-math",)},
    "spread_ablation": {"steps": 6, "seeds": (0, 1),
                        "cases": (("qwen3-4b-h100", 4, "paper-math"),),
                        "grid": [(0, 0, 0, True), (4, 2, 4, True)]},
    "spec_budget": {"steps": 3, "seeds": (0,), "d_bases": (1,)},
    "drift": {"steps": 4, "seeds": (0,)},
    "bias_check": {"steps": 4},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from outdir import default_out

    p = argparse.ArgumentParser(description="TailSieve paper-reproduction benchmark suite")
    p.add_argument("--out", default=str(default_out("results")),
                   help="results root; the suite writes <out>/paper/*.json|png (default: "
                        "under the system temp dir)")
    p.add_argument("--quick", action="store_true", help="smaller configuration (~3 min)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes: checks the code runs")
    p.add_argument("--real-engine", action="store_true",
                   help="also run benchmarks/bench_real_engine.py (two vLLM CPU servers)")
    p.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(MODULES)}")
    p.add_argument("--report-only", action="store_true",
                   help="only rewrite the report from the existing JSON")
    p.add_argument("--markdown", default="",
                   help="where to write the report (default <out>/REPORT.md)")
    return p.parse_args(argv)


def run_real_engine(out_root: Path) -> dict[str, Any]:
    """Call ``bench_real_engine.main`` with its output under ``out_root``."""
    mod = importlib.import_module("bench_real_engine")
    t0 = time.perf_counter()
    rc = mod.main(["--out", str(out_root / "real_engine")])
    return {"rc": rc, "runtime_s": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    """Run the selected items, then write the report; returns 1 if any item failed."""
    args = parse_args(argv)
    from paper import report
    from paper.common import machine_info

    out_root = Path(args.out).resolve()
    out_dir = out_root / "paper"
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(MODULES)
    unknown = sorted(set(names) - set(MODULES))
    if unknown:
        print(f"error: unknown item(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}",
              file=sys.stderr)
        return 2
    failed: list[str] = []
    suite_path = out_dir / "suite.json"
    suite: dict[str, Any] = json.loads(suite_path.read_text()) if suite_path.is_file() else {}
    if not args.report_only:
        t_all = time.perf_counter()
        timings: dict[str, float] = dict(suite.get("timings_s", {}))
        for name in names:
            t0 = time.perf_counter()
            mode = "smoke" if args.smoke else "quick" if args.quick else "full"
            print(f"[run_all] {name} ({mode}) ...", flush=True)
            try:
                kwargs = SMOKE[name] if args.smoke else {}
                importlib.import_module(f"paper.{name}").run(out_dir, args.quick or args.smoke,
                                                             **kwargs)
            except Exception:
                traceback.print_exc()
                failed.append(name)
            timings[name] = round(time.perf_counter() - t0, 1)
            print(f"[run_all] {name}: {timings[name]:.1f} s", flush=True)
        if args.real_engine:
            print("[run_all] real engine ...", flush=True)
            try:
                res = run_real_engine(out_root)
                timings["real_engine"] = res["runtime_s"]
                if res["rc"]:
                    failed.append("real_engine")
            except Exception:
                traceback.print_exc()
                failed.append("real_engine")
        suite = {
            "mode": "smoke" if args.smoke else "quick" if args.quick else "full",
            "items": names,
            "timings_s": timings,
            "runtime_s": round(time.perf_counter() - t_all, 1),
            "failed": failed,
            "machine": machine_info(),
            "command": "python benchmarks/run_all.py " + " ".join(argv or sys.argv[1:]),
        }
        suite_path.write_text(json.dumps(suite, indent=2) + "\n")
    md = report.write(out_dir, Path(args.markdown or out_root / "REPORT.md"), suite)
    print(f"[run_all] wrote {md}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
