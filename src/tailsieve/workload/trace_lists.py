"""The trace's list columns (token ids, streamed chunks): building and validating them (see
``workload.trace`` for what they hold)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tailsieve.errors import TraceError

if TYPE_CHECKING:
    from tailsieve.workload.trace import Trace

ObjArray = npt.NDArray[np.object_]


def list_array(rows: Sequence[Sequence[Any]], kind: type) -> ObjArray:
    """One tuple per row (``kind`` int or float), in an object array."""
    arr = np.empty(len(rows), dtype=object)
    try:
        arr[:] = [tuple(map(kind, r)) for r in rows]
    except (TypeError, ValueError) as exc:
        raise TraceError(f"list column values must be lists of {kind.__name__}: {exc}") from None
    return arr


def _chunk_defect(
    ts: tuple[float, ...], ks: tuple[int, ...], length: int
) -> tuple[str, str] | None:
    """What is wrong with one row's chunk columns (field, message), or None."""
    if len(ts) != len(ks):
        return "chunk_tokens", f"{len(ks)} marks for {len(ts)} chunk times"
    if any(not math.isfinite(t) or t < 0 for t in ts):
        return "chunk_times_s", "times must be finite and >= 0"
    if any(b < a for a, b in itertools.pairwise(ts)):
        return "chunk_times_s", "times must be non-decreasing"
    if any(b < a for a, b in itertools.pairwise(ks)) or (ks and ks[0] < 0):
        return "chunk_tokens", "marks must be non-decreasing and >= 0"
    if ks and ks[-1] != length:
        return "chunk_tokens", f"last mark {ks[-1]} is not response_tokens {length}"
    return None


def validate_lists(trace: Trace, where: Callable[[int], str]) -> None:
    """Token ids: one per generated token, none negative. Chunks: given together, as many
    times as token marks per row, both non-decreasing, times finite and >= 0, the last mark
    equal to the response's length."""
    resp = trace.response_tokens.tolist()
    if trace.token_ids is not None:
        for i, (ids, length) in enumerate(zip(trace.token_ids.tolist(), resp, strict=True)):
            if len(ids) != length:
                raise TraceError(
                    f"{trace.source}: {where(i)}: field 'token_ids': {len(ids)} ids for "
                    f"response_tokens {length}"
                )
            if ids and min(ids) < 0:
                raise TraceError(f"{trace.source}: {where(i)}: field 'token_ids': negative id")
    times, marks = trace.chunk_times_s, trace.chunk_tokens
    if (times is None) != (marks is None):
        given, missing = ("chunk_times_s", "chunk_tokens")[:: 1 if marks is None else -1]
        raise TraceError(f"{trace.source}: column '{given}' needs column '{missing}' too")
    if times is None or marks is None:
        return
    rows = zip(times.tolist(), marks.tolist(), resp, strict=True)
    for i, (ts, ks, length) in enumerate(rows):
        why = _chunk_defect(ts, ks, length)
        if why:
            raise TraceError(f"{trace.source}: {where(i)}: field '{why[0]}': {why[1]}")
