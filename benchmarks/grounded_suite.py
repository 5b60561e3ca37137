"""Issue 11's must-show items on the grounded profiles, one command:

::

    .venv/bin/python benchmarks/grounded_suite.py            # full: 5 seeds x 20 steps
    .venv/bin/python benchmarks/grounded_suite.py --quick    # 2 seeds x 12 steps
    .venv/bin/python benchmarks/grounded_suite.py --only headline,table4
    .venv/bin/python benchmarks/grounded_suite.py --report-only

Items (``benchmarks/grounded/<name>.py``): ``headline`` (every policy, 4B R = 8, 30B R = 4, weak /
strong tails, AIME), ``table4`` (N = 64 / 128 / 256), ``fig6b`` (convergence), ``table2``
(routing, + MTP, + DFlash) and ``decision`` (``bench_sim.py`` on ``qwen3-4b-h100``). Writes
``<out>/<name>.json|png`` and ``<out>/grounded.md``, and puts that section into ``benchmarks/results/REPORT.md``
between its markers.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

ITEMS = ("headline", "table4", "fig6b", "table2", "decision")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="TailSieve grounded-profile suite (issue 11)")
    p.add_argument("--out", default=str(HERE / "results" / "grounded"))
    p.add_argument("--quick", action="store_true", help="2 seeds x 12 steps")
    p.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(ITEMS)}")
    p.add_argument("--report-only", action="store_true", help="only rewrite the markdown")
    p.add_argument("--markdown", default=str(HERE / "results" / "REPORT.md"),
                   help="file that receives the section ('' = none)")
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
                    importlib.import_module("bench_sim").main("qwen3-4b-h100",
                                                              out / "sim_decision.json")
                else:
                    importlib.import_module(f"grounded.{name}").run(out, args.quick)
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
