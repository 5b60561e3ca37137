"""Turn traces on disk: a ``TurnTrace`` is a length trace with the three turn columns.

One row per trajectory, as in every trace: ``prompt_id``, ``step``, ``sample``,
``response_tokens`` (the sum of the turns' outputs), ``prompt_tokens``, ``finish_reason`` (when
the trajectories have one) and, per turn, ``turn_output_tokens``, ``turn_tool_s`` and
``turn_tool_output_tokens`` (lists, one value per turn; see ``workload.trace``). JSONL, CSV and
Parquet (and gzip text) by suffix, read and validated by ``workload.io``: every defect names the
file, the row and the field, and no row is dropped.

A trace without the turn columns (today's single-turn traces, e.g. the shipped ``aime`` and
``smollm2-math``) reads as one-turn trajectories: each response is one turn with no tool call.
A file without ``prompt_tokens`` reads with ``default_prompt_tokens`` (0: unknown).
"""

from __future__ import annotations

from pathlib import Path

from tailsieve.errors import TraceError
from tailsieve.workload.io import Engine, read_trace, write_trace
from tailsieve.workload.trace import Trace
from tailsieve.workload.trace_lists import TURN_COLUMNS
from tailsieve.workload.turns import Trajectory, Turn, TurnTrace


def trace_to_turns(trace: Trace, default_prompt_tokens: int = 0) -> TurnTrace:
    """The trajectories of a length trace (rows in order); rows without turn columns are
    one-turn trajectories. Raises ``TraceError`` naming the row and field for a value a
    trajectory cannot hold (a response of 0 tokens is not a turn)."""
    n = trace.num_rows
    ids = trace.prompt_id_array().tolist()
    step, sample, resp = trace.step.tolist(), trace.sample.tolist(), trace.response_tokens.tolist()
    prompt = [default_prompt_tokens] * n if trace.prompt_tokens is None else \
        trace.prompt_tokens.tolist()
    finish = [None] * n if trace.finish_reason is None else trace.finish_reason.tolist()
    cols = [getattr(trace, c) for c in TURN_COLUMNS]
    per_turn = None if any(c is None for c in cols) else \
        list(zip(*(c.tolist() for c in cols if c is not None), strict=True))
    out: list[Trajectory] = []
    for i in range(n):
        try:
            if per_turn is None:
                turns: tuple[Turn, ...] = (Turn(resp[i]),)
            else:
                outs, tools, touts = per_turn[i]
                turns = tuple(map(Turn, outs, tools, touts))
            out.append(Trajectory(ids[i], sample[i], prompt[i], turns, step[i], finish[i]))
        except TraceError as exc:
            raise TraceError(f"{trace.source}: row {i + 1}: {_field_of(exc)}") from None
    return TurnTrace(tuple(out))


def _field_of(exc: TraceError) -> str:
    """The part of a ``Turn``/``Trajectory`` message after its owner ("field '...': ...");
    a bare ``response_tokens`` 0 is named as that column."""
    msg = str(exc)
    if msg.startswith("Turn: field 'output_tokens'"):
        return "field 'response_tokens': " + msg.split(": ", 2)[-1] + " (a turn outputs >= 1)"
    return msg.split(": ", 1)[-1] if msg.startswith(("Turn:", "trajectory")) else msg


def turns_to_trace(turns: TurnTrace, source: str = "<memory>") -> Trace:
    """The length trace of ``turns`` (one row per trajectory, in order, with turn columns).
    ``finish_reason`` is written when every trajectory has one, and not when none has; a mix
    is a ``TraceError`` (a column is all or nothing)."""
    trajs = turns.trajectories
    reasons = [tr.finish_reason for tr in trajs]
    given = sum(r is not None for r in reasons)
    if 0 < given < len(reasons):
        i = next(i for i, r in enumerate(reasons) if r is None)
        raise TraceError(f"{source}: trajectory {i} {trajs[i].key}: field 'finish_reason': "
                         f"missing (given for {given} of {len(reasons)} trajectories)")
    return Trace.from_columns(
        prompt_id=[tr.prompt_id for tr in trajs],
        response_tokens=[tr.output_tokens for tr in trajs],
        sample=[tr.sample for tr in trajs],
        step=[tr.step for tr in trajs],
        prompt_tokens=[tr.prompt_tokens for tr in trajs],
        finish_reason=reasons if given else None,  # type: ignore[arg-type]
        source=source,
        turn_output_tokens=[[u.output_tokens for u in tr.turns] for tr in trajs],
        turn_tool_s=[[u.tool_s for u in tr.turns] for tr in trajs],
        turn_tool_output_tokens=[[u.tool_output_tokens for u in tr.turns] for tr in trajs],
    )


def read_turn_trace(
    path: str | Path, default_prompt_tokens: int = 0, engine: Engine = "auto"
) -> TurnTrace:
    """Read a turn trace, or a single-turn trace as one-turn trajectories (see the module
    doc). A shipped trace can be named instead of a path (``aime``, ``smollm2-math``)."""
    if isinstance(default_prompt_tokens, bool) or default_prompt_tokens < 0:
        raise TraceError(f"default_prompt_tokens must be >= 0, got {default_prompt_tokens}")
    return trace_to_turns(read_trace(path, engine=engine), default_prompt_tokens)


def write_turn_trace(turns: TurnTrace, path: str | Path) -> None:
    """Write ``turns`` in the format named by the suffix (``.jsonl``, ``.csv``, ``.parquet``,
    ``.jsonl.gz``, ``.csv.gz``)."""
    write_trace(turns_to_trace(turns, str(path)), path)
