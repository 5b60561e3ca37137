"""Diagnostics recorded by the driver: present, consistent with the records, and free of side
effects on the controller."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from tailsieve.control.hierarchical import HierarchicalController
from tailsieve.core.controller import Controller
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import (
    SimSettings,
    default_controller,
    epoch_prompt_ids,
    run_policies,
)
from tailsieve.sim.replicas import PoolConfigs

POOLS = PoolConfigs.from_specs(ReplicaConfig(load_profile("illustrative-flat").with_context(55e-9)))


class FakeWorkload:
    """Log-normal lengths with a per-prompt effect."""

    def __init__(self, num_prompts: int = 400) -> None:
        self.ids = tuple(f"p{i}" for i in range(num_prompts))

    def group_lengths(self, prompt_id: str, step: int, n: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
        effect = np.random.default_rng(zlib.crc32(prompt_id.encode())).normal(0, 0.9)
        return np.clip(np.rint(np.exp(7.0 + effect + rng.normal(0, 0.5, n))), 1, 16000).astype(
            np.int64
        )

# m0 = 1: a tail pool and cutoffs from the first step (the spread default starts balanced)
SETTINGS = SimSettings(num_replicas=4, num_groups=16, group_size=4, num_steps=8, seed=3, m0=1)


def _runs(factory=default_controller):  # type: ignore[no-untyped-def]
    wl = FakeWorkload()
    return run_policies(["uniform", "streamrl-oracle", "tailsieve"], SETTINGS,
                        lambda: epoch_prompt_ids(wl.ids, 3), wl, POOLS, factory)


def test_every_step_has_consistent_diagnostics() -> None:
    runs = _runs()
    for pr in runs.values():
        for r in pr.run.records:
            d = r.diagnostics
            assert d is not None
            assert d.tail_time_s == r.tail_time_s and d.bulk_cut_s == r.bulk_cut_s
            assert d.aborted_tokens == r.wasted_tokens
            assert d.num_replicas == SETTINGS.num_replicas
            assert 0 <= d.idle_replica_s <= SETTINGS.num_replicas * r.makespan_s + 1e-9
            assert 0 <= d.tail_idle_replica_s <= r.m * r.makespan_s + 1e-9
            assert 0 <= d.aborted_replica_s <= (SETTINGS.num_replicas - r.m) * r.makespan_s
            assert d.capture_candidates <= d.capture_k <= max(r.q, 0)
            json.dumps(r.to_dict())  # serialisable as written by simulate --out
    ts = runs["tailsieve"].run.records
    assert ts[0].diagnostics.predicted_bulk_s is None  # warm-up: nothing observed yet
    assert all(r.diagnostics.predicted_bulk_s is not None for r in ts[1:])
    assert all(r.diagnostics.capture_k == r.q for r in ts if not r.is_flush)
    assert any(r.diagnostics.aborted_replica_s > 0 for r in ts)
    assert runs["uniform"].run.records[2].diagnostics.predicted_bulk_s is None
    summ = runs["tailsieve"].run.summary(runs["uniform"].run)
    assert set(summ["diagnostics"]) >= {"tail_obs_over_pred", "capture_rate", "idle_fraction"}
    assert summ["paired_speedup"] is not None and summ["paired_steady_from"] == 5


def test_predictions_do_not_change_the_run() -> None:
    def silent(name: str, s: SimSettings, p: PoolConfigs) -> Controller:
        c = default_controller(name, s, p)
        c.predict_pool_times = lambda q, m: None  # type: ignore[method-assign]
        return c

    a, b = _runs(), _runs(silent)
    for name in a:
        ra, rb = a[name].run.records, b[name].run.records
        assert [r.makespan_s for r in ra] == [r.makespan_s for r in rb]
        assert [(r.q, r.m) for r in ra] == [(r.q, r.m) for r in rb]


def test_controller_prediction_applies_its_corrections() -> None:
    runs = _runs()
    ctrl = runs["tailsieve"].protocol.controller  # type: ignore[union-attr]
    assert isinstance(ctrl, HierarchicalController)
    q, m = max(ctrl.state.q, 1), max(ctrl.state.m, 1)
    p = ctrl.predict_pool_times(q, m)
    assert p is not None
    raw = ctrl.predictor.predict(ctrl.state.history, q, m)
    assert p.raw_tail_s == pytest.approx(raw.tail_s)
    assert p.raw_bulk_s == pytest.approx(raw.bulk_s)
    assert p.tail_s == pytest.approx(raw.tail_s * ctrl.state.k_tail)
    assert p.bulk_s == pytest.approx(raw.bulk_s * ctrl.state.k_bulk)
    uni = ctrl.predict_pool_times(0, 0)
    assert uni is not None and uni.bulk_s == pytest.approx(uni.raw_bulk_s)
