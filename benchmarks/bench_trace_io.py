"""Time reading (and writing) a 1,000,000-row trace in JSONL, CSV and Parquet.

Run from the repository root:
``.venv/bin/python benchmarks/bench_trace_io.py --out benchmarks/results/trace_io.json`` (the
committed result; without ``--out`` a file under the system temp dir; ``--rows`` for a smaller
trace, a multiple of 80). ``auto`` uses pyarrow's readers when installed
(falling back to Python on any defect); ``python`` forces the pure-Python parser.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from outdir import default_out

from tailsieve.workload import SyntheticWorkload, preset, read_trace, write_trace

ROWS = 1_000_000
ROWS_PER_PROMPT = 80  # 10 steps x 8 samples


def _best_of(fn: Any, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=default_out("trace_io.json"),
                    help="result JSON (default: under the system temp dir)")
    ap.add_argument("--rows", type=int, default=ROWS, help="trace rows (a multiple of 80)")
    ap.add_argument("--repeats", type=int, default=2, help="reads per engine (best is kept)")
    args = ap.parse_args(argv)
    rows = max(1, args.rows // ROWS_PER_PROMPT) * ROWS_PER_PROMPT
    # 12,500 prompts x 10 steps x 8 samples = 1,000,000 rows, with finish_reason
    trace = SyntheticWorkload(preset("paper-math"), rows // ROWS_PER_PROMPT,
                              seed=0).generate_trace(10, 8)
    assert trace.num_rows == rows
    results: dict[str, Any] = {
        "rows": rows,
        "columns": list(trace.columns()),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        "formats": {},
    }
    try:
        import pyarrow

        results["pyarrow"] = pyarrow.__version__
    except ImportError:
        results["pyarrow"] = None
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in (".jsonl", ".csv", ".parquet"):
            path = Path(tmp) / f"trace{suffix}"
            t0 = time.perf_counter()
            write_trace(trace, path)
            entry: dict[str, Any] = {
                "write_s": round(time.perf_counter() - t0, 6),
                "file_mb": round(path.stat().st_size / 2**20, 1),
            }
            engines = ["auto"] if suffix == ".parquet" else ["auto", "python"]
            for engine in engines:
                if engine == "auto" and results["pyarrow"] is None and suffix == ".parquet":
                    continue
                back = read_trace(path, engine=engine)  # type: ignore[arg-type]
                assert back.same_rows(trace)
                entry[f"read_{engine}_s"] = round(
                    _best_of(lambda p=path, e=engine: read_trace(p, engine=e), args.repeats), 6
                )
            results["formats"][suffix.lstrip(".")] = entry
            print(suffix, entry, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
