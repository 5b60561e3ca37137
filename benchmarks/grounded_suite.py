"""Issue 11's must-show items on the grounded profiles, one command:

::

    .venv/bin/python benchmarks/grounded_suite.py            # full: 5 seeds x 20 steps
    .venv/bin/python benchmarks/grounded_suite.py --quick    # 2 seeds x 12 steps
    .venv/bin/python benchmarks/grounded_suite.py --only headline,table4
    .venv/bin/python benchmarks/grounded_suite.py --report-only
    # the committed results and the committed report's section:
    .venv/bin/python benchmarks/grounded_suite.py --out benchmarks/results/grounded \
        --markdown benchmarks/results/REPORT.md

Items (``benchmarks/grounded/<name>.py``): ``headline`` (every policy, 4B R = 8, 30B R = 4, weak /
strong tails, AIME), ``table4`` (N = 64 / 128 / 256), ``fig6b`` (convergence), ``table2``
(routing, + MTP, + DFlash) and ``decision`` (``bench_sim.py`` on ``qwen3-4b-h100``). Writes
``<out>/<name>.json|png`` and ``<out>/grounded.md`` (``--out`` default: a folder under the system
temp dir), and with ``--markdown FILE`` puts that section into FILE between its markers.
``--smoke`` runs every item at a tiny shape (seconds; the test suite's check).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

ITEMS = ("headline", "table4", "fig6b", "table2", "decision")
# --smoke: each item at the smallest shape that runs its code path
SMOKE: dict[str, dict[str, Any]] = {
    "headline": {"steps": 6, "seeds": (0,), "policies": ("uniform", "tailsieve"),
                 "configs": (("t", "paper-math", "qwen3-4b-h100", 2, 4),)},
    "table4": {"steps": 6, "seeds": (0,), "sizes": (4,), "profiles": ("qwen3-4b-h100",)},
    "fig6b": {"steps": 3, "profiles": ("qwen3-4b-h100",)},
    "table2": {"steps": 6, "seeds": (0,), "profiles": ("qwen3.5-4b-h100",)},
}


def main(argv: list[str] | None = None) -> int:
    from outdir import default_out

    p = argparse.ArgumentParser(description="TailSieve grounded-profile suite (issue 11)")
    p.add_argument("--out", default=str(default_out("grounded")),
                   help="results folder (default: under the system temp dir)")
    p.add_argument("--smoke", action="store_true", help="every item at a tiny shape (seconds)")
    p.add_argument("--quick", action="store_true", help="2 seeds x 12 steps")
    p.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(ITEMS)}")
    p.add_argument("--report-only", action="store_true", help="only rewrite the markdown")
    p.add_argument("--markdown", default="",
                   help="file that receives the section, e.g. benchmarks/results/REPORT.md (default: none)")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(ITEMS)
    unknown = sorted(set(names) - set(ITEMS))
    if unknown:
        print(f"error: unknown item(s) {', '.join(unknown)}; choose from {', '.join(ITEMS)}",
              file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    if not args.report_only:
        for name in names:
            t0 = time.perf_counter()
            print(f"[grounded] {name} ...", flush=True)
            try:
                if name == "decision":
                    shape = {"num_steps": 3, "num_groups": 16} if args.smoke else {}
                    importlib.import_module("bench_sim").main("qwen3-4b-h100",
                                                              out / "sim_decision.json", **shape)
                else:
                    kwargs = SMOKE.get(name, {}) if args.smoke else {}
                    importlib.import_module(f"grounded.{name}").run(out, args.quick or args.smoke,
                                                                    **kwargs)
            except Exception:
                traceback.print_exc()
                failed.append(name)
            print(f"[grounded] {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    from grounded import report

    md = report.write(out, HERE.parent.resolve(), Path(args.markdown) if args.markdown else None)
    print(f"[grounded] wrote {md}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
