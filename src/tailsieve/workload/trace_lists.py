"""The trace's list columns (token ids, streamed chunks, turns): their names and kinds, building
and validating them (see ``workload.trace`` for what they hold).

This module sits below ``workload.trace``: it knows the columns, not the ``Trace`` class.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tailsieve.errors import TraceError

ObjArray = npt.NDArray[np.object_]
IntArray = npt.NDArray[np.int64]

TURN_COLUMNS: tuple[str, ...] = ("turn_output_tokens", "turn_tool_s", "turn_tool_output_tokens")
LIST_KINDS: dict[str, type] = {
    "token_ids": int,
    "chunk_times_s": float,
    "chunk_tokens": int,
    "turn_output_tokens": int,
    "turn_tool_s": float,
    "turn_tool_output_tokens": int,
}
LIST_COLUMNS: tuple[str, ...] = tuple(LIST_KINDS)
FLOAT_LIST_COLUMNS: tuple[str, ...] = tuple(c for c, k in LIST_KINDS.items() if k is float)


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


def turn_defect(
    outs: tuple[int, ...], tools: tuple[float, ...], touts: tuple[int, ...], length: int
) -> tuple[str, str] | None:
    """What is wrong with one row's turn columns (field, message), or None: as many tool
    times and tool outputs as turns, at least one turn, each turn >= 1 output token and the
    turns summing to ``response_tokens``, tool times finite and >= 0, tool outputs >= 0, and
    no tool call after the last turn."""
    if not outs:
        return "turn_output_tokens", "no turns (a trajectory has at least one)"
    for name, other in (("turn_tool_s", tools), ("turn_tool_output_tokens", touts)):
        if len(other) != len(outs):
            return name, f"{len(other)} values for {len(outs)} turns"
    bad = next((i for i, o in enumerate(outs) if o < 1), None)
    if bad is not None:
        return "turn_output_tokens", f"turn {bad} outputs {outs[bad]} tokens (each turn >= 1)"
    if sum(outs) != length:
        return "turn_output_tokens", f"turns sum to {sum(outs)}, not response_tokens {length}"
    if any(not math.isfinite(t) or t < 0 for t in tools):
        return "turn_tool_s", "tool times must be finite and >= 0"
    if any(t < 0 for t in touts):
        return "turn_tool_output_tokens", "tool outputs must be >= 0"
    if tools[-1] != 0 or touts[-1] != 0:
        field = "turn_tool_s" if tools[-1] != 0 else "turn_tool_output_tokens"
        return field, "the last turn has a tool call (its tool time and output must be 0)"
    return None


def _pair_missing(lists: Mapping[str, ObjArray | None], names: Sequence[str]) -> str | None:
    """An error message when some but not all of ``names`` are given, else None."""
    given = [n for n in names if lists.get(n) is not None]
    if not given or len(given) == len(names):
        return None
    missing = [n for n in names if n not in given]
    return f"column '{given[0]}' needs column '{missing[0]}' too"


def validate_lists(
    source: str,
    response_tokens: IntArray,
    lists: Mapping[str, ObjArray | None],
    where: Callable[[int], str],
) -> None:
    """Validate the list columns given in ``lists`` (name -> one tuple per row, or None).

    Token ids: one per generated token, none negative. Chunks: given together, as many times
    as token marks per row, both non-decreasing, times finite and >= 0, the last mark equal to
    the response's length. Turns: the three turn columns together, each row as ``turn_defect``
    requires."""
    resp = response_tokens.tolist()
    ids_col = lists.get("token_ids")
    if ids_col is not None:
        for i, (ids, length) in enumerate(zip(ids_col.tolist(), resp, strict=True)):
            if len(ids) != length:
                raise TraceError(
                    f"{source}: {where(i)}: field 'token_ids': {len(ids)} ids for "
                    f"response_tokens {length}"
                )
            if ids and min(ids) < 0:
                raise TraceError(f"{source}: {where(i)}: field 'token_ids': negative id")
    for names, check in ((("chunk_times_s", "chunk_tokens"), _chunk_defect),
                         (TURN_COLUMNS, turn_defect)):
        why_missing = _pair_missing(lists, names)
        if why_missing:
            raise TraceError(f"{source}: {why_missing}")
        cols = [lists.get(n) for n in names]
        if any(c is None for c in cols):
            continue
        rows = zip(*(c.tolist() for c in cols if c is not None), resp, strict=True)
        for i, row in enumerate(rows):
            why = check(*row)
            if why:
                raise TraceError(f"{source}: {where(i)}: field '{why[0]}': {why[1]}")
