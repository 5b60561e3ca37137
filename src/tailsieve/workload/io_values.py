"""Column value parsing and validation shared by the trace readers (see ``io``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Container
from typing import Any

import numpy as np

from tailsieve.errors import TraceError
from tailsieve.workload.trace import ALL_COLUMNS, LIST_COLUMNS, REQUIRED_COLUMNS, Trace
from tailsieve.workload.trace_lists import FLOAT_LIST_COLUMNS

PARQUET_HINT = "reading/writing Parquet needs pyarrow: pip install 'tailsieve[parquet]'"
ALIASES = {"checkpoint": "step"}
INT_FIELDS = ("step", "sample", "response_tokens", "prompt_tokens", "replica")


class Bad(ValueError):
    """A single value is malformed (message without location)."""


def optional_pyarrow() -> Any | None:
    try:
        import pyarrow
    except ImportError:
        return None
    return pyarrow


def _one_int(v: Any, text: bool) -> int:
    out = _one_int_unchecked(v, text)
    if not -(2**63) <= out < 2**63:
        raise Bad(f"value {v!r} out of the 64-bit integer range")
    return out


def _one_int_unchecked(v: Any, text: bool) -> int:
    if v is None or (text and v.strip() == ""):
        raise Bad("missing value")
    if text:
        try:
            return int(v)
        except ValueError:
            pass
        try:
            f = float(v)
        except ValueError:
            raise Bad(f"non-numeric value {v!r}") from None
    else:
        if type(v) is int:
            return v
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise Bad(f"non-numeric value {v!r} (expected an integer)")
        f = float(v)
    if not math.isfinite(f) or not f.is_integer():
        raise Bad(f"non-integer value {v!r}")
    return int(f)


def _one_bool(v: Any, text: bool) -> bool:
    if text:
        key = v.strip().lower()
        if key in ("1", "true"):
            return True
        if key in ("0", "false"):
            return False
    elif isinstance(v, bool) or (type(v) is int and v in (0, 1)):
        return bool(v)
    if v is None or (text and v.strip() == ""):
        raise Bad("missing value")
    raise Bad(f"invalid boolean {v!r} (expected 0/1/true/false)")


def _one_str(v: Any, text: bool, allow_int: bool) -> str:
    if text:
        if v == "":
            raise Bad("missing value")
        return str(v)
    if type(v) is str and v != "":
        return v
    if allow_int and type(v) is int:
        return str(v)
    if v is None or v == "":
        raise Bad("missing value")
    raise Bad(f"expected a string, got {v!r}")


def _one_list(v: Any, floats: bool) -> tuple[Any, ...]:
    """A list of ints (``floats``: of numbers, as floats), given as a list or as its JSON text
    (CSV cells)."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            raise Bad(f"not a JSON list: {v[:40]!r}") from None
    if v is None:
        raise Bad("missing value")
    if not isinstance(v, list | tuple):
        raise Bad(f"expected a list, got {v!r:.40}")
    if floats:
        if any(isinstance(x, bool) or not isinstance(x, int | float) for x in v):
            raise Bad("expected a list of numbers")
        return tuple(map(float, v))
    if any(type(x) is not int for x in v):
        bad = next(x for x in v if type(x) is not int)
        raise Bad(f"expected a list of integers, found {bad!r:.40}")
    return tuple(v)


def convert_column(
    field: str, values: list[Any], text: bool, source: str, line_of: Callable[[int], str]
) -> Any:
    """Column ``values`` (strings when ``text``, else JSON/Arrow values) to a typed array; a
    list column to a list of tuples."""
    if field in LIST_COLUMNS:
        floats = field in FLOAT_LIST_COLUMNS
        rows: list[tuple[Any, ...]] = []
        for i, v in enumerate(values):
            try:
                rows.append(_one_list(v, floats))
            except Bad as exc:
                raise TraceError(f"{source}: {line_of(i)}: field '{field}': {exc}") from None
        return rows
    if field in INT_FIELDS:
        if text:
            try:
                return np.array(list(map(int, values)), dtype=np.int64)
            except (ValueError, OverflowError):
                pass
        elif set(map(type, values)) == {int}:
            try:
                return np.array(values, dtype=np.int64)
            except OverflowError:
                pass
        conv: Callable[[Any], Any] = lambda v: _one_int(v, text)  # noqa: E731
    elif field == "correct":
        conv = lambda v: _one_bool(v, text)  # noqa: E731
    else:
        allow_int = field == "prompt_id"
        if "" not in values and (text or set(map(type, values)) == {str}):
            return values
        conv = lambda v: _one_str(v, text, allow_int)  # noqa: E731
    out: list[Any] = []
    for i, v in enumerate(values):
        try:
            out.append(conv(v))
        except Bad as exc:
            raise TraceError(f"{source}: {line_of(i)}: field '{field}': {exc}") from None
    if field in INT_FIELDS:
        return np.array(out, dtype=np.int64)
    return out


def check_required(columns: Container[str], source: str, line_of: Callable[[int], str]) -> None:
    """A ``TraceError`` naming the first of ``REQUIRED_COLUMNS`` that ``columns`` lacks."""
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise TraceError(
            f"{source}: {line_of(-1)}: field '{missing[0]}': missing column "
            f"(required: {', '.join(REQUIRED_COLUMNS)})"
        )


def build_trace(
    columns: dict[str, list[Any]], text: bool, source: str, line_of: Callable[[int], str]
) -> Trace:
    check_required(columns, source, line_of)
    conv = {
        name: convert_column(name, vals, text, source, line_of) for name, vals in columns.items()
    }
    return Trace.from_columns(
        prompt_id=conv["prompt_id"],
        response_tokens=conv["response_tokens"],
        sample=conv["sample"],
        step=conv.get("step"),
        prompt_tokens=conv.get("prompt_tokens"),
        finish_reason=conv.get("finish_reason"),
        correct=conv.get("correct"),
        source=source,
        line_of=line_of,
        replica=conv.get("replica"),
        **{c: conv.get(c) for c in LIST_COLUMNS},
    )


def canonical(name: str) -> str:
    key = name.strip()
    return ALIASES.get(key, key)


def from_arrow(table: Any, source: str, line_of: Callable[[int], str]) -> Trace:
    """Arrow table to trace; ill-typed columns go through the Python value checks."""
    pa = optional_pyarrow()
    assert pa is not None
    import pyarrow.compute as pc

    columns: dict[str, Any] = {}
    for name in table.column_names:
        key = canonical(name)
        if key in columns:
            raise TraceError(f"{source}: field '{key}': duplicate column")
        if key in ALL_COLUMNS:
            columns[key] = table.column(name)
    if table.num_rows == 0:
        raise TraceError(f"{source}: no data rows")
    check_required(columns, source, line_of)
    fast: dict[str, Any] = {}
    slow: dict[str, list[Any]] = {}
    for key, col in columns.items():
        t = col.type
        ok = col.null_count == 0 and (
            (key in INT_FIELDS and pa.types.is_integer(t))
            or (key == "correct" and pa.types.is_boolean(t))
            or (key in ("prompt_id", "finish_reason") and pa.types.is_string(t))
        )
        if ok and pa.types.is_string(t):
            ok = not pc.any(pc.equal(col, "")).as_py()  # empty strings: Python path reports them
        if key == "correct" and col.null_count == 0 and pa.types.is_integer(t):
            mn, mx = pc.min_max(col).values()
            if mn.as_py() >= 0 and mx.as_py() <= 1:
                fast[key] = col.to_numpy().astype(bool)
                continue
        if ok and key == "prompt_id":
            enc = col.combine_chunks().dictionary_encode()
            fast["prompt_names"] = tuple(enc.dictionary.to_pylist())
            fast["prompt_codes"] = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        elif ok and key in INT_FIELDS:
            fast[key] = col.to_numpy().astype(np.int64)
        elif ok:
            fast[key] = col.to_numpy(zero_copy_only=False)
        else:
            slow[key] = col.to_pylist()
    conv = {k: convert_column(k, v, False, source, line_of) for k, v in slow.items()}
    rest: dict[str, Any] = {k: conv.get(k, fast.get(k)) for k in ALL_COLUMNS if k != "prompt_id"}
    coded = "prompt_id" not in conv
    return Trace.from_columns(
        fast["prompt_codes"] if coded else conv["prompt_id"], source=source, line_of=line_of,
        prompt_names=fast["prompt_names"] if coded else None, **rest)
