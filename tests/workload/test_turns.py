"""Turn, Trajectory and TurnTrace: validation names the field, contexts add up, groups whole."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailsieve.errors import TraceError
from tailsieve.workload.turns import Trajectory, Turn, TurnTrace


def traj(prompt_id: str = "p", sample: int = 0, step: int = 0, *turns: Turn) -> Trajectory:
    return Trajectory(prompt_id, sample, 100, turns or (Turn(5),), step)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"output_tokens": 0}, "output_tokens"),
        ({"output_tokens": 2.5}, "output_tokens"),
        ({"output_tokens": True}, "output_tokens"),
        ({"output_tokens": 3, "tool_s": -1.0}, "tool_s"),
        ({"output_tokens": 3, "tool_s": math.nan}, "tool_s"),
        ({"output_tokens": 3, "tool_s": math.inf}, "tool_s"),
        ({"output_tokens": 3, "tool_output_tokens": -2}, "tool_output_tokens"),
    ],
)
def test_bad_turn_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(TraceError, match=f"field '{field}'"):
        Turn(**kwargs)  # type: ignore[arg-type]


def test_turn_accepts_numpy_values() -> None:
    t = Turn(np.int64(4), np.float32(0.5), np.int32(7))
    assert (t.output_tokens, t.tool_s, t.tool_output_tokens) == (4, 0.5, 7)
    assert type(t.output_tokens) is int and type(t.tool_s) is float


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Trajectory("", 0, 10, (Turn(1),)), "prompt_id"),
        (lambda: Trajectory("p", -1, 10, (Turn(1),)), "sample"),
        (lambda: Trajectory("p", 0, -5, (Turn(1),)), "prompt_tokens"),
        (lambda: Trajectory("p", 0, 10, (Turn(1),), step=-1), "step"),
        (lambda: Trajectory("p", 0, 10, ()), "turns"),
        (lambda: Trajectory("p", 0, 10, (5,)), "turns"),  # type: ignore[arg-type]
        (lambda: Trajectory("p", 0, 10, (Turn(1, 2.0, 3),)), "turns"),
        (lambda: Trajectory("p", 0, 10, (Turn(1),), finish_reason=""), "finish_reason"),
    ],
)
def test_bad_trajectory_names_the_field(build: object, field: str) -> None:
    with pytest.raises(TraceError, match=f"field '{field}'"):
        build()  # type: ignore[operator]


def test_last_turn_may_not_call_a_tool() -> None:
    with pytest.raises(TraceError, match="last turn has a tool call"):
        Trajectory("p", 0, 10, (Turn(3, 1.0, 10), Turn(2, 0.0, 4)))


@given(st.integers(0, 1000), st.lists(
    st.tuples(st.integers(1, 500), st.floats(0, 100), st.integers(0, 800)), min_size=1,
    max_size=12))
def test_context_at_is_prompt_plus_earlier_turns(prompt: int, raw: list[tuple]) -> None:
    turns = [Turn(o, s, t) for o, s, t in raw[:-1]] + [Turn(raw[-1][0])]
    tr = Trajectory("p", 0, prompt, turns)
    assert tr.turns == tuple(turns)
    ctx = prompt
    for t in range(tr.num_turns):
        assert tr.context_at(t) == ctx
        ctx += turns[t].output_tokens + turns[t].tool_output_tokens
    assert tr.final_context_tokens == ctx
    assert tr.output_tokens == sum(u.output_tokens for u in turns)
    assert tr.tool_s == pytest.approx(sum(u.tool_s for u in turns))
    with pytest.raises(TraceError, match="no turn"):
        tr.context_at(tr.num_turns)


def test_groups_and_steps() -> None:
    trs = (traj("b", 1, 0), traj("a", 0, 1), traj("b", 0, 0), traj("a", 0, 0), traj("c", 2, 0))
    tt = TurnTrace(trs)
    assert tt.steps() == [0, 1]
    groups = tt.groups(0)
    assert [[t.key for t in g] for g in groups] == [
        [("b", 0, 0), ("b", 0, 1)], [("a", 0, 0)], [("c", 0, 2)]
    ]
    assert [t.key for t in tt.groups(1)[0]] == [("a", 1, 0)]
    assert tt.groups(7) == []
    assert len(tt) == 5


def test_turn_trace_rejects_duplicates_and_empty() -> None:
    with pytest.raises(TraceError, match=r"trajectory 2: field 'sample': duplicate"):
        TurnTrace((traj("a", 0), traj("a", 1), traj("a", 0)))
    with pytest.raises(TraceError, match="no trajectories"):
        TurnTrace(())
    with pytest.raises(TraceError, match="not a Trajectory"):
        TurnTrace((traj(), "x"))  # type: ignore[arg-type]
