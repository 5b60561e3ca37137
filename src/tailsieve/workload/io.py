"""Read and write traces as JSONL, CSV or Parquet (chosen by file suffix).

Every defect is reported as a ``TraceError`` naming the file, the row (the 1-based line number
in text files, the 1-based row in Parquet) and the field. Rows are never dropped silently. When
``pyarrow`` is installed, CSV and JSONL are parsed by its C++ readers first; any file those
readers do not accept cleanly is re-read by the pure-Python parser, which produces the precise
error (or the same trace).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Literal

from tailsieve.errors import TraceError
from tailsieve.workload.io_text import (
    read_csv_arrow,
    read_csv_python,
    read_jsonl_arrow,
    read_jsonl_python,
)
from tailsieve.workload.io_values import PARQUET_HINT, from_arrow, optional_pyarrow
from tailsieve.workload.shipped import resolve_trace_path
from tailsieve.workload.trace import Trace

Engine = Literal["auto", "pyarrow", "python"]
FORMATS: tuple[str, ...] = (".jsonl", ".csv", ".parquet")


def _fmt(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise TraceError(f"{path}: unknown trace format {suffix!r}; use .jsonl, .csv or .parquet")
    return suffix


def _pyarrow() -> Any | None:
    return optional_pyarrow()


# ---------------------------------------------------------------------------- public API
def read_trace(path: str | Path, engine: Engine = "auto") -> Trace:
    """Read a ``.jsonl``, ``.csv`` or ``.parquet`` trace, validating every row.

    ``engine="python"`` forces the pure-Python parser for CSV/JSONL; ``"auto"`` tries pyarrow
    first when it is installed. Raises ``TraceError`` naming file, row and field on any defect.
    A shipped trace can be named instead of a path (``"aime"``, see ``workload.shipped``).
    """
    p = resolve_trace_path(path)
    if p.is_dir():
        raise TraceError(f"{p}: is a folder, not a trace file")
    fmt = _fmt(p)
    if not p.is_file():
        raise TraceError(f"{p}: no such trace file")
    if p.stat().st_size == 0:
        raise TraceError(f"{p}: empty file")
    if fmt == ".parquet":
        if _pyarrow() is None:
            raise TraceError(f"{p}: {PARQUET_HINT}")
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(p)
        except Exception as exc:  # pyarrow raises many types for corrupt files
            raise TraceError(f"{p}: not a readable Parquet file: {exc}") from None
        return from_arrow(table, str(p), lambda i: "row 1" if i < 0 else f"row {i + 1}")
    if engine not in ("auto", "pyarrow", "python"):
        raise TraceError(f"unknown trace reader engine {engine!r}")
    if engine != "python":
        fast = read_csv_arrow(p) if fmt == ".csv" else read_jsonl_arrow(p)
        if fast is not None:
            return fast
        if engine == "pyarrow" and _pyarrow() is None:
            raise TraceError(f"{p}: engine 'pyarrow' requested but pyarrow is not installed")
    try:
        return read_csv_python(p) if fmt == ".csv" else read_jsonl_python(p)
    except UnicodeDecodeError as exc:
        raise TraceError(f"{p}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    except OSError as exc:
        raise TraceError(f"{p}: cannot read: {exc.strerror or exc}") from None


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` in the format named by the suffix; ``step`` is always written."""
    p = Path(path)
    fmt = _fmt(p)
    cols = trace.columns()
    if fmt == ".parquet":
        pa = _pyarrow()
        if pa is None:
            raise TraceError(f"{p}: {PARQUET_HINT}")
        import pyarrow.parquet as pq

        table = pa.table(
            {k: pa.array(v.tolist() if k == "prompt_id" else v) for k, v in cols.items()}
        )
        pq.write_table(table, p)
        return
    names = list(cols)
    if fmt == ".csv":
        values = [_csv_column(k, v) for k, v in cols.items()]
        with p.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(names)
            w.writerows(zip(*values, strict=True))
        return
    enc_names = [json.dumps(n) for n in trace.prompt_names]
    parts: list[list[str]] = []
    for k, v in cols.items():
        if k == "prompt_id":
            parts.append([enc_names[c] for c in trace.prompt_codes.tolist()])
        elif k == "finish_reason":
            parts.append([json.dumps(s) for s in v.tolist()])
        elif k == "correct":
            parts.append(["true" if b else "false" for b in v.tolist()])
        else:
            parts.append([str(x) for x in v.tolist()])
    template = "{{" + ", ".join(json.dumps(n) + ": {}" for n in names) + "}}\n"
    with p.open("w", encoding="utf-8") as f:
        f.writelines(map(template.format, *parts))


def _csv_column(name: str, values: Any) -> list[Any]:
    if name == "correct":
        return [1 if b else 0 for b in values.tolist()]
    return list(values.tolist())
