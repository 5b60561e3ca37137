"""Multi-step driver: pairing across policies and the step invariants over whole runs."""

from __future__ import annotations

import zlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.controller import Controller, ControlTargets
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import (
    ALL_POLICIES,
    PairedLengths,
    SimSettings,
    base_prompt_id,
    epoch_prompt_ids,
    run_policies,
)
from tailsieve.sim.records import PolicyRun
from tailsieve.sim.replicas import PoolConfigs

POOLS = PoolConfigs.from_specs(ReplicaConfig(load_profile("illustrative-flat")))


class FakeWorkload:
    """Log-normal lengths with a per-prompt effect (a stand-in for tailsieve.workload)."""

    def __init__(self, num_prompts: int = 400, tail: float = 0.9) -> None:
        self.ids = tuple(f"p{i}" for i in range(num_prompts))
        self.tail = tail

    def group_lengths(self, prompt_id: str, step: int, n: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
        effect = np.random.default_rng(zlib.crc32(prompt_id.encode())).normal(0, self.tail)
        return np.clip(np.rint(np.exp(7.0 + effect + rng.normal(0, 0.5, n))), 1, 16000).astype(
            np.int64
        )


class ScriptedController(Controller):
    """Follows a fixed (q, m) trajectory; exercises the protocol without the real controller."""

    name = "scripted"

    def __init__(self, qs: list[int], ms: list[int]) -> None:
        self.qs, self.ms, self.t = qs, ms, 0

    def targets(self) -> ControlTargets:
        q = self.qs[min(self.t, len(self.qs) - 1)]
        m = self.ms[min(self.t, len(self.ms) - 1)]
        return ControlTargets(q=q, m=m, num_extra=max(q, 1))

    def observe(self, plan: StepPlan, outcome: StepOutcome) -> None:
        self.t += 1

    def state_dict(self) -> dict[str, object]:
        return {"t": self.t}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.t = int(state["t"])  # type: ignore[call-overload]


def check_invariants(run: PolicyRun, group_size: int) -> None:
    """Every drawn prompt delivered exactly once, within one step of being drawn; every
    delivered group has n responses; nothing aborted is delivered in its aborted attempt."""
    drawn_at = {p: r.step for r in run.records for p in r.drawn_ids}
    delivered = Counter(p for r in run.records for p in r.delivered_ids)
    assert set(delivered) == set(drawn_at)
    assert all(c == 1 for c in delivered.values())
    for r in run.records:
        assert all(s == group_size for s in r.delivered_sizes)
        assert not set(r.aborted_ids) & set(r.delivered_ids)
        for p in r.delivered_ids:
            assert r.step - drawn_at[p] in (0, 1)


def test_same_lengths_for_same_prompt_and_step_across_policies() -> None:
    wl = FakeWorkload()
    lens = PairedLengths(wl, 8, seed=3)
    a, b = lens("p1", 2), PairedLengths(wl, 8, seed=3)("p1", 2)
    assert np.array_equal(a, b)
    assert not np.array_equal(lens("p1", 2), lens("p1", 3))  # regenerated at a later step
    assert not np.array_equal(lens("p1", 2), PairedLengths(wl, 8, seed=4)("p1", 2))


def test_policies_are_paired_on_prompts_and_lengths() -> None:
    wl = FakeWorkload()
    cfg = SimSettings(num_replicas=4, num_groups=16, group_size=8, num_steps=6, seed=1)
    runs = run_policies(ALL_POLICIES, cfg, lambda: epoch_prompt_ids(wl.ids, 7), wl, POOLS)
    uniform = runs["uniform"].run
    for name in ("uniform-oracle", "seer-oracle", "topk-oracle", "streamrl-oracle"):
        for ra, rb in zip(uniform.records, runs[name].run.records, strict=True):
            assert ra.drawn_ids == rb.drawn_ids
            assert ra.lower_bound_s == pytest.approx(rb.lower_bound_s)
    ts = runs["tailsieve"].run
    drawn = [p for r in ts.records for p in r.drawn_ids]
    base = [p for r in uniform.records for p in r.drawn_ids]
    assert drawn[: len(base)] == base[: len(drawn)]  # same ordered stream
    for name in ("tailsieve", "tailsieve-fixed"):
        check_invariants(runs[name].run, 8)
        recs = runs[name].run.records
        carried = [r for r in recs if not r.is_flush][-1].num_aborted > 0
        assert recs[-1].is_flush == carried  # a flush step exactly when prompts are carried
    summary = ts.summary(uniform)
    assert summary["speedup_vs_uniform"] > 0 and 0 <= summary["wasted_token_fraction"] < 1
    assert runs["topk-oracle"].run.steady_lower_bound_ratio >= 1.0


def test_epoch_ids_are_unique_and_map_back() -> None:
    it = epoch_prompt_ids(("a", "b"), seed=None)
    ids = [next(it) for _ in range(6)]
    assert ids == ["a", "b", "a#e1", "b#e1", "a#e2", "b#e2"]
    assert [base_prompt_id(p) for p in ids] == ["a", "b"] * 3


def test_unknown_policy() -> None:
    wl = FakeWorkload()
    cfg = SimSettings(num_replicas=2, num_groups=4, group_size=2, num_steps=1)
    with pytest.raises(ConfigError):
        run_policies(["nope"], cfg, lambda: iter(wl.ids), wl, POOLS)


@settings(max_examples=40, deadline=None)
@given(
    num_replicas=st.integers(2, 6),
    num_groups=st.integers(2, 24),
    group_size=st.integers(1, 4),
    num_steps=st.integers(1, 6),
    qs=st.lists(st.integers(0, 12), min_size=1, max_size=6),
    ms=st.lists(st.integers(0, 5), min_size=1, max_size=6),
    tail=st.floats(0.0, 1.5),
    seed=st.integers(0, 1000),
)
def test_invariants_hold_for_any_trajectory(
    num_replicas: int, num_groups: int, group_size: int, num_steps: int,
    qs: list[int], ms: list[int], tail: float, seed: int,
) -> None:
    wl = FakeWorkload(num_prompts=50, tail=tail)
    cfg = SimSettings(num_replicas=num_replicas, num_groups=num_groups, group_size=group_size,
                      num_steps=num_steps, seed=seed)
    qs = [min(q, num_groups // 2) for q in qs]

    def factory(name: str, s: SimSettings, p: PoolConfigs) -> Controller:
        return ScriptedController(qs, ms)

    runs = run_policies(["tailsieve"], cfg, lambda: epoch_prompt_ids(wl.ids, seed), wl, POOLS,
                        controller_factory=factory)
    run = runs["tailsieve"].run
    check_invariants(run, group_size)
    assert all(len(r.delivered_ids) == num_groups for r in run.regular)


@settings(max_examples=15, deadline=None)
@given(num_replicas=st.integers(2, 8), num_groups=st.integers(4, 32), seed=st.integers(0, 99))
def test_real_controllers_keep_invariants(num_replicas: int, num_groups: int, seed: int) -> None:
    wl = FakeWorkload(num_prompts=80)
    cfg = SimSettings(num_replicas=num_replicas, num_groups=num_groups, group_size=4,
                      num_steps=6, seed=seed)
    runs = run_policies(["tailsieve", "tailsieve-fixed"], cfg,
                        lambda: epoch_prompt_ids(wl.ids, seed), wl, POOLS)
    for r in runs.values():
        check_invariants(r.run, 4)


def test_capped_replicas_use_the_event_engine_over_a_whole_run() -> None:
    wl = FakeWorkload(num_prompts=60)
    cfg = SimSettings(num_replicas=4, num_groups=12, group_size=4, num_steps=5, seed=2)
    capped = PoolConfigs.from_specs(ReplicaConfig(load_profile("illustrative-flat"), max_num_seqs=6,
                                                  prefill_s=0.01))
    runs = run_policies(["uniform", "tailsieve"], cfg, lambda: epoch_prompt_ids(wl.ids, 2), wl,
                        capped)
    check_invariants(runs["tailsieve"].run, 4)
    free = run_policies(["uniform"], cfg, lambda: epoch_prompt_ids(wl.ids, 2), wl, POOLS)
    assert runs["uniform"].run.mean_step_s > free["uniform"].run.mean_step_s
