"""Step-protocol invariants under random workloads, q/m trajectories and replica counts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.controller import Controller, ControlTargets
from tailsieve.core.outcome import AbortedGroup, GroupResult, StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.core.pool import Pool
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol, validate_outcome
from tailsieve.core.stream import PromptStream
from tailsieve.errors import ProtocolError


class ScriptedController(Controller):
    """Plays back a fixed (q, m, c) trajectory."""

    name = "scripted"

    def __init__(self, script: list[tuple[int, int, int]], spread: bool = False) -> None:
        self.script = script
        self.spread = spread
        self.i = 0

    def targets(self) -> ControlTargets:
        q, m, c = self.script[min(self.i, len(self.script) - 1)]
        return ControlTargets(q=q, m=m, num_extra=c, spread=self.spread)

    def observe(self, plan: StepPlan, outcome: StepOutcome) -> None:
        self.i += 1

    def state_dict(self) -> dict[str, Any]:
        return {"i": self.i}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.i = state["i"]


def random_execute(plan: StepPlan, rng: np.random.Generator) -> StepOutcome:
    """Executor double: random completion time per group, cutoff by the plan's rule."""
    done = {a.prompt_id: float(rng.exponential(1.0)) for a in plan.assignments}
    fresh = sorted((a for a in plan.assignments if plan.is_abortable(a)), key=lambda a: done[a.prompt_id])
    keep = fresh[: plan.num_fresh_to_deliver]
    cut = done[keep[-1].prompt_id] if keep else 0.0
    delivered = [a for a in plan.assignments if not plan.is_abortable(a)] + keep
    n = plan.group_size
    res = tuple(
        GroupResult(a.prompt_id, a.pool, a.replica, done[a.prompt_id], tuple([10] * n))
        for a in delivered
    )
    ab = tuple(
        AbortedGroup(a.prompt_id, a.replica, int(rng.integers(0, n)), 5, -1, 20)
        for a in fresh[plan.num_fresh_to_deliver :]
    )
    tail = max((g.completion_s for g in res if g.pool is Pool.TAIL), default=0.0)
    bulk = max([cut] + [g.completion_s for g in res if g.pool is Pool.BULK])
    return StepOutcome(plan.step, res, ab, tail, bulk, max(tail, bulk), 0, 0)


@settings(max_examples=60, deadline=None)
@given(
    num_replicas=st.integers(1, 6),
    num_groups=st.integers(1, 20),
    group_size=st.integers(1, 4),
    num_prompts=st.integers(0, 120),
    script=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 6), st.integers(0, 12)), min_size=1, max_size=12),
    seed=st.integers(0, 2**31),
    spread=st.booleans(),
)
def test_every_prompt_delivered_exactly_once_within_one_step(
    num_replicas: int, num_groups: int, group_size: int, num_prompts: int, script: list[tuple[int, int, int]], seed: int,
    spread: bool,
) -> None:
    rng = np.random.default_rng(seed)
    clipped = [(q, m, min(c, num_groups // 2)) for q, m, c in script]
    proto = RolloutProtocol(
        ProtocolConfig(num_replicas, num_groups, group_size), ScriptedController(clipped, spread)
    )
    stream = PromptStream(f"p{i}" for i in range(num_prompts))
    drawn_at: dict[str, int] = {}
    delivered_at: dict[str, int] = {}
    for _ in range(60):
        if stream.exhausted and not proto.candidates:
            break
        must, need = proto.num_fresh_to_deliver(), proto.num_fresh_needed()
        assert must == num_groups - len(proto.candidates) and must <= need
        plan = proto.plan_step(stream, flush=stream.exhausted)
        if not plan.is_flush and len(plan.fresh_prompt_ids) >= must:
            assert plan.num_fresh_to_deliver == must  # the rest, up to ``need``, are extra
        for pid in plan.fresh_prompt_ids:
            assert pid not in drawn_at
            drawn_at[pid] = plan.step
        check_placement(plan, spread)
        outcome = random_execute(plan, rng)
        validate_outcome(plan, outcome)
        for g in outcome.delivered:
            assert g.prompt_id not in delivered_at, "delivered twice"
            delivered_at[g.prompt_id] = plan.step
            assert len(g.response_tokens) == group_size
        assert not set(outcome.delivered_ids) & {a.prompt_id for a in outcome.aborted}
        assert plan.m == 0 or plan.q >= 1
        assert plan.q <= num_groups and len(plan.tail_replicas) == plan.m
        proto.update_from_outcome(plan, outcome)
    if not proto.candidates and stream.exhausted:
        assert set(delivered_at) == set(drawn_at) == {f"p{i}" for i in range(num_prompts)}
    for pid, t in delivered_at.items():
        assert 0 <= t - drawn_at[pid] <= 1


def check_placement(plan: StepPlan, spread: bool) -> None:
    """Every response runs in its group's pool; spread pools hold responses evenly (counts
    per replica differ by at most one), whole groups otherwise."""
    n = plan.group_size
    for pool, reps in ((Pool.TAIL, plan.tail_replicas), (Pool.BULK, plan.bulk_replicas)):
        counts = dict.fromkeys(reps, 0)
        for a in plan.assignments:
            if a.pool is not pool:
                continue
            where = a.response_replicas(n)
            assert set(where) <= set(reps)
            assert len(set(where)) == (min(n, len(reps)) if spread else 1)
            for r in where:
                counts[r] += 1
        if spread and counts:
            assert max(counts.values()) - min(counts.values()) <= 1


def test_spread_deals_responses_round_robin() -> None:
    proto = RolloutProtocol(ProtocolConfig(3, 4, 2), ScriptedController([(0, 0, 1)], spread=True))
    plan = proto.plan_step(PromptStream(f"p{i}" for i in range(10)))
    assert [a.response_replicas(2) for a in plan.assignments] == [
        (0, 1), (2, 0), (1, 2), (0, 1), (2, 0)
    ]
    assert [a.replica for a in plan.assignments] == [0, 2, 1, 0, 2]


def test_warmup_is_uniform_and_launches_extras() -> None:
    proto = RolloutProtocol(ProtocolConfig(4, 8, 2), ScriptedController([(3, 2, 3)]))
    plan = proto.plan_step(PromptStream(f"p{i}" for i in range(100)))
    assert plan.is_warmup and plan.m == 0 and plan.q == 0
    assert plan.num_launched == 11 and plan.num_fresh_to_deliver == 8
    assert {a.replica for a in plan.assignments} == {0, 1, 2, 3}


def test_candidates_ranked_by_evidence_and_tail_gets_the_top() -> None:
    proto = RolloutProtocol(ProtocolConfig(4, 8, 4), ScriptedController([(2, 1, 3)]))
    stream = PromptStream(f"p{i}" for i in range(100))
    plan = proto.plan_step(stream)
    keep = plan.assignments[:8]
    res = tuple(GroupResult(a.prompt_id, a.pool, a.replica, 1.0, (1, 1, 1, 1)) for a in keep)
    ab = (
        AbortedGroup("p8", 0, 3, 30, -1, 40),  # one response unfinished
        AbortedGroup("p9", 1, 0, 0, -1, 40),  # nothing finished: strongest evidence
        AbortedGroup("p10", 2, 3, 90, -1, 40),  # one unfinished, longer finished ones
    )
    proto.update_from_outcome(plan, StepOutcome(0, res, ab, 0.0, 1.0, 1.0, 120, 200))
    assert proto.candidates == ["p9", "p10", "p8"]
    plan = proto.plan_step(stream)
    assert plan.tail_ids == ("p9", "p10") and plan.m == 1 and plan.tail_replicas == (3,)
    assert plan.carried_in_bulk_ids == ("p8",)
    assert plan.num_fresh_to_deliver == 8 - 3 and plan.num_extra == 3


def test_outcome_violations_are_rejected() -> None:
    proto = RolloutProtocol(ProtocolConfig(2, 4, 1), ScriptedController([(0, 0, 1)]))
    plan = proto.plan_step(PromptStream(f"p{i}" for i in range(10)))
    ok = random_execute(plan, np.random.default_rng(0))
    lost = StepOutcome(0, ok.delivered[:-1], ok.aborted, 0, 1, 1, 0, 0)
    with pytest.raises(ProtocolError, match="lost"):
        validate_outcome(plan, lost)
    twice = StepOutcome(0, ok.delivered + ok.delivered[:1], ok.aborted, 0, 1, 1, 0, 0)
    with pytest.raises(ProtocolError, match="twice"):
        validate_outcome(plan, twice)
    short = tuple(GroupResult(g.prompt_id, g.pool, g.replica, 1.0, ()) for g in ok.delivered)
    with pytest.raises(ProtocolError, match="responses"):
        validate_outcome(plan, StepOutcome(0, short, ok.aborted, 0, 1, 1, 0, 0))
    with pytest.raises(ProtocolError, match="not consumed"):
        proto.plan_step(PromptStream(["x"]))


def test_state_dict_roundtrip_resumes_identically() -> None:
    def run(resume_at: int | None) -> list[tuple[str, ...]]:
        rng = np.random.default_rng(3)
        proto = RolloutProtocol(ProtocolConfig(3, 6, 2), ScriptedController([(2, 1, 2)]))
        stream = PromptStream(f"p{i}" for i in range(200))
        out = []
        for t in range(8):
            if t == resume_at:
                state = proto.state_dict()
                drawn = stream.num_drawn
                proto = RolloutProtocol(ProtocolConfig(3, 6, 2), ScriptedController([(2, 1, 2)]))
                proto.load_state_dict(state)
                stream = PromptStream(f"p{i}" for i in range(200))
                stream.skip(drawn)
            plan = proto.plan_step(stream)
            out.append(tuple(a.prompt_id for a in plan.assignments))
            proto.update_from_outcome(plan, random_execute(plan, rng))
        return out

    assert run(None) == run(4)
