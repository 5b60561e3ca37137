"""The length-trace schema: one row per generated response, stored column-wise.

A row is ``(prompt_id, step, sample, response_tokens[, prompt_tokens, finish_reason,
correct, replica, token_ids, chunk_times_s, chunk_tokens, turn_output_tokens, turn_tool_s,
turn_tool_output_tokens])``. ``step`` is the policy checkpoint
(0 when a file has no such column), ``sample`` the index of the response inside its prompt
group. ``(prompt_id, step, sample)`` must be unique.

Recorded rollouts (``tailsieve record``) add ``replica`` (the server that generated the
response, an index into the recording's endpoints), ``token_ids`` (the generated token ids;
as many as ``response_tokens``) and, when streamed, ``chunk_times_s`` (arrival of each streamed
chunk, seconds after the request was sent; non-decreasing) with ``chunk_tokens`` (tokens
generated after each chunk; non-decreasing, the last equal to ``response_tokens``).

A multi-turn trajectory (``workload.turns``) is one row whose ``response_tokens`` is the sum of
its turns' outputs, with the three turn columns: per turn the output tokens
(``turn_output_tokens``, each >= 1), the seconds of the tool call after it (``turn_tool_s``) and
the tokens that call appends to the context (``turn_tool_output_tokens``); both 0 after the last
turn. A row without them is a one-turn trajectory.

The list columns are dropped when lengths are rewritten (``with_lengths``): they would no
longer match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from tailsieve.errors import TraceError
from tailsieve.workload.trace_lists import LIST_COLUMNS, LIST_KINDS, list_array, validate_lists

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
ObjArray = npt.NDArray[np.object_]

REQUIRED_COLUMNS: tuple[str, ...] = ("prompt_id", "sample", "response_tokens")
ALL_COLUMNS: tuple[str, ...] = (
    "prompt_id",
    "step",
    "sample",
    "response_tokens",
    "prompt_tokens",
    "finish_reason",
    "correct",
    "replica",
    *LIST_COLUMNS,
)


def _int_array(values: Any) -> IntArray:
    return np.ascontiguousarray(np.asarray(values, dtype=np.int64))


@dataclass(frozen=True, slots=True, eq=False)
class Trace:
    """Column-wise response-length trace.

    ``prompt_codes[i]`` indexes ``prompt_names`` (names in order of first appearance). Optional
    columns are ``None`` when absent. Build one with ``Trace.from_columns``; equality of rows is
    ``same_rows``.
    """

    prompt_names: tuple[str, ...]
    prompt_codes: IntArray
    step: IntArray
    sample: IntArray
    response_tokens: IntArray
    prompt_tokens: IntArray | None = None
    finish_reason: ObjArray | None = None
    correct: BoolArray | None = None
    source: str = field(default="<memory>")
    replica: IntArray | None = None
    token_ids: ObjArray | None = None  # per row a tuple of ints
    chunk_times_s: ObjArray | None = None  # per row a tuple of floats
    chunk_tokens: ObjArray | None = None  # per row a tuple of ints
    turn_output_tokens: ObjArray | None = None  # per row a tuple of ints, one per turn
    turn_tool_s: ObjArray | None = None  # per row a tuple of floats (seconds), one per turn
    turn_tool_output_tokens: ObjArray | None = None  # per row a tuple of ints, one per turn

    @classmethod
    def from_columns(
        cls,
        prompt_id: Sequence[str] | npt.ArrayLike,
        response_tokens: npt.ArrayLike,
        sample: npt.ArrayLike | None = None,
        step: npt.ArrayLike | None = None,
        prompt_tokens: npt.ArrayLike | None = None,
        finish_reason: Sequence[str] | npt.ArrayLike | None = None,
        correct: npt.ArrayLike | None = None,
        source: str = "<memory>",
        line_of: Callable[[int], str] | None = None,
        replica: npt.ArrayLike | None = None,
        token_ids: Sequence[Sequence[int]] | None = None,
        chunk_times_s: Sequence[Sequence[float]] | None = None,
        chunk_tokens: Sequence[Sequence[int]] | None = None,
        turn_output_tokens: Sequence[Sequence[int]] | None = None,
        turn_tool_s: Sequence[Sequence[float]] | None = None,
        turn_tool_output_tokens: Sequence[Sequence[int]] | None = None,
        prompt_names: Sequence[str] | None = None,
    ) -> Trace:
        """Build and validate a trace from equal-length columns.

        ``sample`` defaults to the position inside each (prompt, step) group and ``step`` to 0.
        ``line_of(i)`` names row ``i`` in error messages (default ``row i+1``). The list
        columns take one sequence per row. With ``prompt_names``, ``prompt_id`` holds each
        row's index into it instead of a name.
        """
        if prompt_names is None:
            ids = prompt_id if isinstance(prompt_id, list) else np.asarray(prompt_id, dtype=object)
            ids = ids.tolist() if isinstance(ids, np.ndarray) else ids
            if set(map(type, ids)) != {str}:
                ids = [str(p) for p in ids]
            names = {p: i for i, p in enumerate(dict.fromkeys(ids))}
            prompt_names = tuple(names)
            prompt_id = np.fromiter(map(names.__getitem__, ids), dtype=np.int64, count=len(ids))
        codes = _int_array(prompt_id)
        n = codes.size
        resp = _int_array(response_tokens)
        st = np.zeros(n, dtype=np.int64) if step is None else _int_array(step)
        smp = _group_positions(codes, st) if sample is None else _int_array(sample)
        trace = cls(
            prompt_names=tuple(prompt_names),
            prompt_codes=codes,
            step=st,
            sample=smp,
            response_tokens=resp,
            prompt_tokens=None if prompt_tokens is None else _int_array(prompt_tokens),
            finish_reason=None if finish_reason is None else _str_array(finish_reason),
            correct=None if correct is None else np.asarray(correct, dtype=np.bool_),
            source=source,
            replica=None if replica is None else _int_array(replica),
            **_lists(
                token_ids=token_ids,
                chunk_times_s=chunk_times_s,
                chunk_tokens=chunk_tokens,
                turn_output_tokens=turn_output_tokens,
                turn_tool_s=turn_tool_s,
                turn_tool_output_tokens=turn_tool_output_tokens,
            ),
        )
        trace.validate(line_of)
        return trace

    # ------------------------------------------------------------------ checks
    def validate(self, line_of: Callable[[int], str] | None = None) -> None:
        """Raise ``TraceError`` (file, row, field) for negative values or duplicate keys."""
        where = line_of or (lambda i: f"row {i + 1}")
        n = self.prompt_codes.size
        if n == 0:
            raise TraceError(f"{self.source}: trace has no rows")
        for name in ("step", "sample", "response_tokens", "prompt_tokens", "replica"):
            arr: IntArray | None = getattr(self, name)
            if arr is None:
                continue
            if arr.size != n:
                raise TraceError(f"{self.source}: column '{name}' has {arr.size} rows, not {n}")
            bad = np.flatnonzero(arr < 0)
            if bad.size:
                i = int(bad[0])
                raise TraceError(
                    f"{self.source}: {where(i)}: field '{name}': negative value {int(arr[i])}"
                )
        for name, other in (("finish_reason", self.finish_reason), ("correct", self.correct),
                            *((c, getattr(self, c)) for c in LIST_COLUMNS)):
            if other is not None and other.size != n:
                raise TraceError(f"{self.source}: column '{name}' has {other.size} rows, not {n}")
        lists = {c: getattr(self, c) for c in LIST_COLUMNS}
        validate_lists(self.source, self.response_tokens, lists, where)
        key = np.stack([self.prompt_codes, self.step, self.sample], axis=1)
        order = np.lexsort((self.sample, self.step, self.prompt_codes))
        sk = key[order]
        dup = np.flatnonzero(np.all(sk[1:] == sk[:-1], axis=1))
        if dup.size:
            a, b = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
            p = self.prompt_names[int(self.prompt_codes[b])]
            raise TraceError(
                f"{self.source}: {where(b)}: field 'sample': duplicate (prompt_id, step, sample) "
                f"= ({p!r}, {int(self.step[b])}, {int(self.sample[b])}), first at {where(a)}"
            )

    # ------------------------------------------------------------------ views
    @property
    def num_rows(self) -> int:
        """Number of responses."""
        return int(self.prompt_codes.size)

    @property
    def num_prompts(self) -> int:
        """Number of distinct prompts."""
        return len(self.prompt_names)

    @property
    def steps(self) -> IntArray:
        """Sorted distinct checkpoints."""
        return np.unique(self.step)

    @property
    def is_multi_checkpoint(self) -> bool:
        """True when the trace holds more than one step."""
        return self.steps.size > 1

    def prompt_id_array(self) -> ObjArray:
        """Per-row prompt id strings."""
        return np.asarray(self.prompt_names, dtype=object)[self.prompt_codes]

    def columns(self) -> dict[str, Any]:
        """Present columns by name (schema order), as numpy arrays."""
        out: dict[str, Any] = {"prompt_id": self.prompt_id_array()}
        for name in ALL_COLUMNS[1:]:
            if (val := getattr(self, name)) is not None:
                out[name] = val
        return out

    def to_rows(self) -> list[tuple[Any, ...]]:
        """Rows as tuples of Python values in schema order (absent columns omitted)."""
        cols = [c.tolist() for c in self.columns().values()]
        return list(zip(*cols, strict=True))

    def same_rows(self, other: Trace) -> bool:
        """True when both traces hold the same columns and rows in the same order."""
        return list(self.columns()) == list(other.columns()) and self.to_rows() == other.to_rows()

    def select(self, mask: npt.ArrayLike) -> Trace:
        """Rows where ``mask`` is true (prompt names keep their order; unused names dropped)."""
        m = np.asarray(mask)
        codes = self.prompt_codes[m]
        used = np.unique(codes)
        remap = np.full(len(self.prompt_names), -1, dtype=np.int64)
        remap[used] = np.arange(used.size)
        cols: dict[str, Any] = {
            c: None if (v := getattr(self, c)) is None else v[m] for c in ALL_COLUMNS[1:]
        }
        return replace(
            self,
            prompt_names=tuple(self.prompt_names[int(c)] for c in used),
            prompt_codes=remap[codes],
            **cols,
        )

    def with_lengths(self, response_tokens: npt.ArrayLike) -> Trace:
        """A copy with new response lengths (same keys and other columns, except the list
        columns -- token ids, chunks, turns -- which would no longer match and are dropped)."""
        arr = _int_array(response_tokens)
        if arr.shape != self.response_tokens.shape:
            raise TraceError(f"{self.source}: new lengths have shape {arr.shape}")
        no_lists: dict[str, Any] = dict.fromkeys(LIST_COLUMNS)
        return replace(self, response_tokens=arr, **no_lists)

    def cell_index(self) -> tuple[IntArray, IntArray, IntArray]:
        """``(cell_prompt, cell_step, row_cell)``: distinct (prompt, step) cells, and each row's
        cell index; cells are sorted by (prompt code, step)."""
        keys = self.prompt_codes * (int(self.step.max()) + 1) + self.step
        uniq, inv = np.unique(keys, return_inverse=True)
        width = int(self.step.max()) + 1
        return uniq // width, uniq % width, inv.astype(np.int64)

    def samples_by_prompt(self) -> list[IntArray]:
        """Response lengths of each prompt (all steps, sample order), indexed by prompt code."""
        order = np.lexsort((self.sample, self.step, self.prompt_codes))
        counts = np.bincount(self.prompt_codes, minlength=self.num_prompts)
        return np.split(self.response_tokens[order], np.cumsum(counts)[:-1])


def _lists(**columns: Sequence[Sequence[Any]] | None) -> dict[str, ObjArray | None]:
    """The given list columns as object arrays of tuples (absent ones None)."""
    return {
        name: None if rows is None else list_array(rows, LIST_KINDS[name])
        for name, rows in columns.items()
    }


def _str_array(values: Any) -> ObjArray:
    vals = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if vals and set(map(type, vals)) != {str}:
        vals = [str(v) for v in vals]
    arr = np.empty(len(vals), dtype=object)
    arr[:] = vals
    return arr


def _group_positions(codes: IntArray, steps: IntArray) -> IntArray:
    """0, 1, 2, ... inside each (code, step) group, in row order."""
    n = codes.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    keys = codes * (int(steps.max()) + 1) + steps
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    start = np.r_[0, np.flatnonzero(sk[1:] != sk[:-1]) + 1]
    first = np.repeat(start, np.diff(np.r_[start, n]))
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) - first
    return out
