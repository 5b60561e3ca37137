"""CSV and JSONL readers: pyarrow fast paths and the pure-Python parsers (see ``io``)."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

from tailsieve.errors import TraceError
from tailsieve.workload.io_values import (
    ALL_COLUMNS,
    INT_FIELDS,
    build_trace,
    canonical,
    from_arrow,
    optional_pyarrow,
)
from tailsieve.workload.trace import LIST_COLUMNS, Trace
from tailsieve.workload.trace_lists import FLOAT_LIST_COLUMNS


def _gz(path: Path) -> bool:
    return path.name.lower().endswith(".gz")


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed when it is gzip (``.gz``)."""
    data = path.read_bytes()
    return gzip.decompress(data) if _gz(path) else data


def _open_text(path: Path) -> IO[str]:
    """The file as text for the ``csv`` module (BOM skipped, newlines as they are)."""
    if _gz(path):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return path.open(newline="", encoding="utf-8-sig")


# ---------------------------------------------------------------------------- CSV
def _csv_line_of(path: Path) -> Callable[[int], str]:
    """Map a data-row index to its line number by re-scanning (only used on errors)."""

    def line_of(i: int) -> str:
        if i < 0:
            return "line 1 (header)"
        with _open_text(path) as f:
            reader = csv.reader(f)
            next(reader, None)
            k = -1
            for row in reader:
                if row:
                    k += 1
                    if k == i:
                        return f"line {reader.line_num}"
        return f"data row {i + 1}"

    return line_of


def _split_simple_csv(path: Path) -> tuple[list[str], list[list[str]]] | None:
    """Fast path for CSV without quoting or blank lines: split the whole text at once and
    slice columns. Returns None when the file needs the full ``csv`` module."""
    text = _read_bytes(path).decode("utf-8-sig")
    if '"' in text or "\r" in text:
        return None
    if text.endswith("\n"):
        text = text[:-1]
    header, _, body = text.partition("\n")
    if not body or "\n\n" in body:
        return None
    names = header.split(",")
    width = len(names)
    nrows = body.count("\n") + 1
    fields = body.replace("\n", ",").split(",")
    if len(fields) != width * nrows:
        return None
    return names, [fields[j::width] for j in range(width)]


def read_csv_python(path: Path) -> Trace:
    source = str(path)
    line_of = _csv_line_of(path)
    simple = _split_simple_csv(path)
    if simple is not None:
        names = [canonical(h) for h in simple[0]]
        if len(set(names)) == len(names):
            columns = {n: c for n, c in zip(names, simple[1], strict=True) if n in ALL_COLUMNS}
            return build_trace(columns, True, source, line_of)
    with _open_text(path) as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise TraceError(f"{source}: empty file (expected a header line)")
        rows = [r for r in reader if r]
    names = [canonical(h) for h in header]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise TraceError(f"{source}: line 1 (header): field '{dup[0]}': duplicate column")
    if not rows:
        raise TraceError(f"{source}: no data rows after the header")
    width = len(header)
    bad = next((i for i, r in enumerate(rows) if len(r) != width), None)
    if bad is not None:
        raise TraceError(
            f"{source}: {line_of(bad)}: field '{names[min(len(rows[bad]), width - 1)]}': "
            f"expected {width} fields, got {len(rows[bad])}"
        )
    cols = list(zip(*rows, strict=True))
    columns = {n: list(cols[j]) for j, n in enumerate(names) if n in ALL_COLUMNS}
    return build_trace(columns, True, source, line_of)


def read_csv_arrow(path: Path) -> Trace | None:
    pa = optional_pyarrow()
    if pa is None:
        return None
    import pyarrow.csv as pcsv

    as_text = ("prompt_id", "finish_reason", *LIST_COLUMNS)
    opts = pcsv.ConvertOptions(
        column_types=dict.fromkeys(as_text, pa.string()), strings_can_be_null=False
    )
    try:
        table = pcsv.read_csv(str(path), convert_options=opts)
    except (pa.ArrowInvalid, pa.ArrowException, OSError):
        return None
    if table.num_rows == 0:
        return None
    for name in table.column_names:
        col = table.column(name)
        if canonical(name) in ALL_COLUMNS and col.null_count:
            return None
        if canonical(name) in INT_FIELDS and not pa.types.is_integer(col.type):
            return None
    return from_arrow(table, str(path), _csv_line_of(path))


# ---------------------------------------------------------------------------- JSONL
def _jsonl_line_of(path: Path) -> Callable[[int], str]:
    def line_of(i: int) -> str:
        if i < 0:
            return "line 1"
        k = -1
        with (gzip.open(path, "rb") if _gz(path) else path.open("rb")) as f:
            for ln, raw in enumerate(f, 1):
                if raw.strip():
                    k += 1
                    if k == i:
                        return f"line {ln}"
        return f"record {i + 1}"

    return line_of


def read_jsonl_python(path: Path) -> Trace:
    source = str(path)
    data = _read_bytes(path)
    if not data.strip():
        raise TraceError(f"{source}: empty file")
    ends_clean = data.endswith(b"\n")
    body = data[:-1] if ends_clean else data
    objs: list[Any] = []
    if b"\n\n" not in body and not body.startswith(b"\n"):
        # no blank lines: record i is on line i + 1; parse everything in one C-level call
        nrec = body.count(b"\n") + 1
        linenos: list[int] | range = range(1, nrec + 1)
        try:
            objs = json.loads(b"[" + body.replace(b"\n", b",") + b"]")
        except ValueError:
            objs = []
        if len(objs) != nrec or set(map(type, objs)) != {dict}:
            objs = []
    if not objs:  # blank lines or a defect: line by line, for the exact location
        lines = data.split(b"\n")
        linenos = [ln for ln, raw in enumerate(lines, 1) if raw.strip()]
        objs = _parse_jsonl_lines(source, lines, linenos[-1], ends_clean)

    def line_of(i: int) -> str:
        return f"line {linenos[max(i, 0)]}"

    keys = list(objs[0]) + sorted(set().union(*objs).difference(objs[0]))
    columns: dict[str, list[Any]] = {}
    for key in keys:
        name = canonical(key)
        if name not in ALL_COLUMNS:
            continue
        if name in columns:
            raise TraceError(f"{source}: field '{name}': given both as '{key}' and its alias")
        try:
            vals = list(map(itemgetter(key), objs))
        except KeyError:
            i = next(i for i, o in enumerate(objs) if key not in o)
            raise TraceError(
                f"{source}: {line_of(i)}: field '{name}': missing field (present in other rows)"
            ) from None
        columns[name] = vals
    return build_trace(columns, False, source, line_of)


def _parse_jsonl_lines(source: str, lines: list[bytes], last: int, ends_clean: bool) -> list[Any]:
    objs: list[Any] = []
    loads = json.loads
    for ln, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = loads(raw)
        except ValueError as exc:
            why = (
                f"{exc.msg} (column {exc.colno})"
                if isinstance(exc, json.JSONDecodeError)
                else str(exc)
            )
            if ln == last and not ends_clean:
                raise TraceError(
                    f"{source}: line {ln}: truncated record (file ends mid-object): {why}"
                ) from None
            raise TraceError(f"{source}: line {ln}: malformed JSON: {why}") from None
        if type(obj) is not dict:
            raise TraceError(f"{source}: line {ln}: expected a JSON object, got {obj!r:.40}")
        objs.append(obj)
    return objs


def read_jsonl_arrow(path: Path) -> Trace | None:
    pa = optional_pyarrow()
    if pa is None:
        return None
    import pyarrow.json as pjson

    source: Any = path
    if _gz(path):
        try:
            data = _read_bytes(path)
        except (OSError, EOFError):
            return None  # the Python parser reports it
        if not data.endswith(b"\n"):
            return None
        source = pa.BufferReader(data)
    else:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 1))
            if size == 0 or f.read(1) != b"\n":
                return None  # let the Python parser judge a possibly truncated last line
    try:
        table = pjson.read_json(source)
    except (pa.ArrowInvalid, pa.ArrowException, OSError):
        return None
    for name in table.column_names:
        col = table.column(name)
        key = canonical(name)
        if key in ALL_COLUMNS and (col.null_count or pa.types.is_struct(col.type)):
            return None
        if key in LIST_COLUMNS and key not in FLOAT_LIST_COLUMNS and not _int_list(pa, col.type):
            return None  # e.g. a float among the ids made every row's ids floats
    return from_arrow(table, str(path), _jsonl_line_of(path))


def _int_list(pa: Any, t: Any) -> bool:
    """A list type of integers (or of nothing: every list empty)."""
    if not pa.types.is_list(t):
        return False
    v = t.value_type
    return bool(pa.types.is_integer(v) or pa.types.is_null(v))
