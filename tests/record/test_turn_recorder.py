"""The multi-turn recorder: events in any interleaving give the same trace, order and values
checked, context continuity and exact sibling copies reported, provenance portable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError, TraceError
from tailsieve.record.turn_recorder import (
    TurnEvent,
    TurnRecorder,
    check_portable,
    package_relative,
)
from tailsieve.workload.agentic_presets import agentic_preset
from tailsieve.workload.turn_io import read_turn_trace
from tailsieve.workload.turns import Trajectory, TurnTrace


def events_of(tt: TurnTrace, with_ids: bool = False) -> list[list[TurnEvent]]:
    """Each trajectory's turns as events (prompt = the context at the turn's start)."""
    out = []
    for tr in tt.trajectories:
        evs = []
        for t, u in enumerate(tr.turns):
            ids = [tr.sample * 1000 + t] * u.output_tokens if with_ids else None
            evs.append(TurnEvent(tr.prompt_id, tr.sample, t, u.output_tokens, u.tool_s,
                                 u.tool_output_tokens, tr.context_at(t), tr.finish_reason
                                 if t == tr.num_turns - 1 else "stop", tr.step, ids))
        out.append(evs)
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), order_seed=st.randoms(use_true_random=False))
def test_any_interleaving_rebuilds_the_trace(seed: int, order_seed: object) -> None:
    tt = agentic_preset("search-agent").generate(3, 2, 2, seed)
    queues = [list(reversed(evs)) for evs in events_of(tt)]
    rec = TurnRecorder(strict_context=True)
    # interleave: always take the next turn of a random unfinished trajectory
    first_seen: list[tuple[str, int, int]] = []
    while any(queues):
        q = order_seed.choice([q for q in queues if q])  # type: ignore[attr-defined]
        ev = q.pop()
        if ev.turn_index == 0:
            first_seen.append(ev.key)
        rec.add(ev)
    got = rec.recording()
    by_key = {t.key: t for t in tt.trajectories}
    assert got.turns == TurnTrace(tuple(by_key[k] for k in first_seen))
    assert got.info["context_mismatches"] == [] and got.info["context_checked"]
    assert got.info["num_turns"] == sum(t.num_turns for t in tt.trajectories)


def test_order_and_values_are_checked() -> None:
    rec = TurnRecorder()
    with pytest.raises(TraceError, match=r"turn 1 arrived after 0 turn"):
        rec.add(TurnEvent("p", 0, 1, 5))
    rec.add(TurnEvent("p", 0, 0, 5, 1.0, 10, prompt_tokens=20))
    with pytest.raises(TraceError, match=r"turn 0 arrived after 1 turn"):
        rec.add(TurnEvent("p", 0, 0, 5))
    with pytest.raises(TraceError, match=r"turn 1: Turn: field 'output_tokens'"):
        rec.add(TurnEvent("p", 0, 1, 0))
    with pytest.raises(TraceError, match="field 'token_ids': 2 ids for output_tokens 3"):
        TurnEvent("p", 0, 0, 3, token_ids=[1, 2])
    with pytest.raises(TraceError, match="field 'sample'"):
        TurnEvent("p", -1, 0, 3)
    with pytest.raises(TraceError, match="field 'prompt_id'"):
        TurnEvent("", 0, 0, 3)
    with pytest.raises(TraceError, match="nothing recorded"):
        TurnRecorder().recording()


def test_unfinished_trajectory_is_an_error() -> None:
    rec = TurnRecorder()
    rec.add(TurnEvent("p", 0, 0, 5, 1.0, 10))
    with pytest.raises(TraceError, match=r"\('p', 0, 0\).*last turn has a tool call"):
        rec.recording()


def test_context_mismatch_is_reported_or_raised() -> None:
    evs = [TurnEvent("p", 0, 0, 5, 1.0, 10, prompt_tokens=20),
           TurnEvent("p", 0, 1, 4, prompt_tokens=36)]  # 20 + 5 + 10 = 35 expected
    rec = TurnRecorder()
    for e in evs:
        rec.add(e)
    info = rec.recording().info
    assert info["context_mismatches"] == [{
        "prompt_id": "p", "step": 0, "sample": 0, "turn": 1, "expected_prompt_tokens": 35,
        "prompt_tokens": 36}]
    strict = TurnRecorder(strict_context=True)
    strict.add(evs[0])
    with pytest.raises(TraceError, match=r"turn 1: field 'prompt_tokens': 36, but the context "
                                         r"is 35"):
        strict.add(evs[1])


def test_sibling_copies_are_flagged_by_token_ids() -> None:
    rec = TurnRecorder()
    ids = {0: ([1, 2], [3]), 1: ([1, 2], [3]), 2: ([1, 2], [4]), 3: ([1, 2], [3])}
    for sample, (a, b) in ids.items():
        rec.add(TurnEvent("p", sample, 0, 2, 0.5, 7, token_ids=a))
        rec.add(TurnEvent("p", sample, 1, 1, token_ids=b))
    rec.add(TurnEvent("q", 0, 0, 2, token_ids=[1, 2]))  # another prompt: not a sibling
    rec.add(TurnEvent("p", 0, 0, 2, token_ids=[1, 2], step=1))  # another step: not a sibling
    info = rec.recording().info
    assert info["copy_check"] is True
    assert info["sibling_copies"] == [
        {"prompt_id": "p", "step": 0, "sample": 1, "copy_of": 0},
        {"prompt_id": "p", "step": 0, "sample": 3, "copy_of": 0},
    ]


def test_copy_check_off_without_token_ids() -> None:
    rec = TurnRecorder()
    rec.add(TurnEvent("p", 0, 0, 2))
    rec.add(TurnEvent("p", 1, 0, 2))
    info = rec.recording().info
    assert info["copy_check"] is False and info["sibling_copies"] == []
    assert info["context_checked"] is False


def test_write_round_trips_with_info(tmp_path: Path) -> None:
    tt = agentic_preset("math-code-agent").generate(2, 3, 1, 4)
    rec = TurnRecorder()
    for evs in events_of(tt, with_ids=True):
        for e in evs:
            rec.add(e)
    prov = {"prompts": package_relative(Path(__file__)), "model": "smollm2", "seed": 4}
    out = rec.recording(prov)
    info_path = out.write(tmp_path / "rec.jsonl")
    assert read_turn_trace(tmp_path / "rec.jsonl") == tt
    info = json.loads(info_path.read_text())
    assert info["model"] == "smollm2" and info["sibling_copies"] == []
    assert info["num_trajectories"] == 6


def test_provenance_holds_package_relative_paths_only() -> None:
    import tailsieve.workload.turns as mod

    assert package_relative(mod.__file__) == "tailsieve/workload/turns.py"
    assert package_relative("/elsewhere/models/smollm2-135m") == "smollm2-135m"
    for bad, where in (({"model": "/work/x/model"}, "provenance.model"),
                       ({"files": ["a.txt", "~/b.txt"]}, r"provenance.files\[1\]"),
                       ({"c": {"d": "C:\\data\\x"}}, "provenance.c.d"),
                       ({"x": float("nan")}, "provenance.x"),
                       ({"p": Path("rel")}, "provenance.p")):
        with pytest.raises(ConfigError, match=where):
            check_portable(bad)
    rec = TurnRecorder()
    rec.add(TurnEvent("p", 0, 0, 1))
    with pytest.raises(ConfigError, match="absolute path"):
        rec.recording({"prompts": "/tmp/prompts.jsonl"})
    assert isinstance(rec.recording({"prompts": "tailsieve/workload/data/x.jsonl"}).turns
                      .trajectories[0], Trajectory)
