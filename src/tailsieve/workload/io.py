"""Read and write traces as JSONL, CSV or Parquet (chosen by file suffix; ``.jsonl.gz`` and
``.csv.gz`` are gzip-compressed text).

Every defect is reported as a ``TraceError`` naming the file, the row (the 1-based line number
in text files, the 1-based row in Parquet) and the field. Rows are never dropped silently. When
``pyarrow`` is installed, CSV and JSONL are parsed by its C++ readers first; any file those
readers do not accept cleanly is re-read by the pure-Python parser, which produces the precise
error (or the same trace).
"""

from __future__ import annotations

import csv
import gzip
import io as _io
import json
import zlib
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
from tailsieve.workload.trace import LIST_COLUMNS, Trace

Engine = Literal["auto", "pyarrow", "python"]
FORMATS: tuple[str, ...] = (".jsonl", ".csv", ".parquet", ".jsonl.gz", ".csv.gz")


def trace_suffix(path: str | Path) -> str:
    """The trace format of ``path`` by its suffix (``.jsonl.gz`` counts as one), lower case;
    ``""`` when it is not one of ``FORMATS``."""
    name = Path(path).name.lower()
    return next((f for f in sorted(FORMATS, key=len, reverse=True) if name.endswith(f)), "")


def _fmt(path: str | Path) -> str:
    suffix = trace_suffix(path)
    if not suffix:
        raise TraceError(
            f"{path}: unknown trace format {Path(path).suffix.lower()!r}; use .jsonl, .csv or "
            ".parquet (.jsonl.gz and .csv.gz for gzip-compressed text)"
        )
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
    csv_like = fmt.startswith(".csv")
    if engine != "python":
        fast = read_csv_arrow(p) if csv_like else read_jsonl_arrow(p)
        if fast is not None:
            return fast
        if engine == "pyarrow" and _pyarrow() is None:
            raise TraceError(f"{p}: engine 'pyarrow' requested but pyarrow is not installed")
    try:
        return read_csv_python(p) if csv_like else read_jsonl_python(p)
    except UnicodeDecodeError as exc:
        raise TraceError(f"{p}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise TraceError(f"{p}: not a complete gzip file ({exc})") from None
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
            {
                k: pa.array(v.tolist() if k == "prompt_id" or k in LIST_COLUMNS else v)
                for k, v in cols.items()
            }
        )
        pq.write_table(table, p)
        return
    names = list(cols)
    if fmt.startswith(".csv"):
        values = [_csv_column(k, v) for k, v in cols.items()]
        buf = _io.StringIO(newline="")
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(names)
        w.writerows(zip(*values, strict=True))
        _write_text(p, buf.getvalue(), fmt)
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
        elif k in LIST_COLUMNS:
            parts.append([_json_list(x) for x in v.tolist()])
        else:
            parts.append([str(x) for x in v.tolist()])
    template = "{{" + ", ".join(json.dumps(n) + ": {}" for n in names) + "}}\n"
    _write_text(p, "".join(map(template.format, *parts)), fmt)


def _write_text(path: Path, text: str, fmt: str) -> None:
    data = text.encode("utf-8")
    if fmt.endswith(".gz"):  # mtime 0: the same trace gives the same bytes
        data = gzip.compress(data, compresslevel=9, mtime=0)
    path.write_bytes(data)


def _json_list(values: tuple[Any, ...]) -> str:
    """``[1,2,3]``: ints as they are, floats by ``repr`` (exact round trip)."""
    return "[" + ",".join(map(repr, values)) + "]"


def _csv_column(name: str, values: Any) -> list[Any]:
    if name == "correct":
        return [1 if b else 0 for b in values.tolist()]
    if name in LIST_COLUMNS:
        return [_json_list(x) for x in values.tolist()]
    return list(values.tolist())
