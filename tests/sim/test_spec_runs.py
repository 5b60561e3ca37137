"""Speculation in the simulator: baseline wiring, placement, exactly-once delivery, CLI."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tailsieve.cli.main import app
from tailsieve.model.acceptance import LITERATURE
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import PolicyRun, SimSettings, epoch_prompt_ids, run_policies
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.spec_api import simulate_spec
from tailsieve.sim.spec_runs import OffsiteMeter, mixed_curve, run_spec_variants, spec_pools
from tailsieve.sim.workloads import resolve_workload

BASE = ReplicaConfig.from_profile(load_profile("qwen3-4b-h100"))


def _setup(seed: int, groups: int = 8, replicas: int = 4, steps: int = 7,
           ) -> tuple[SimSettings, Callable[[], Iterable[str]], object]:
    wl = resolve_workload("paper-math", None, seed=seed, num_prompts=400)
    ds = wl.prompt_ids()
    st_ = SimSettings(num_replicas=replicas, num_groups=groups, group_size=8, num_steps=steps,
                      seed=seed)
    return st_, (lambda: epoch_prompt_ids(ds, seed)), wl


def _times(run: PolicyRun) -> list[float]:
    return [r.makespan_s for r in run.regular]


def test_nospec_baseline_is_plain_round_robin_and_the_honest_one_speculates() -> None:
    settings_, ids, wl = _setup(0)
    res = run_spec_variants(settings_, ids, wl, BASE, LITERATURE["seer"],  # type: ignore[arg-type]
                            variants=("uniform-requests-nospec", "uniform-requests"))
    plain = run_policies(["uniform-requests"], settings_, ids, wl,  # type: ignore[arg-type]
                         PoolConfigs.single(BASE))["uniform-requests"].run
    assert _times(res.runs["uniform-requests-nospec"].run) == _times(plain)
    spec = _times(res.runs["uniform-requests"].run)
    assert all(s < p for s, p in zip(spec, _times(plain), strict=True))  # seer pays here
    # the same prompts were delivered in every variant (paired)
    assert [r.delivered_ids for r in res.runs["uniform-requests"].run.regular] == \
        [r.delivered_ids for r in plain.regular]


def test_spec_pools_price_both_pools_alike() -> None:
    pools = spec_pools(BASE, None, 1)
    assert pools.tail is pools.bulk is BASE
    from tailsieve.model.spec_engine import SpecEngine
    sp = spec_pools(BASE, SpecEngine(LITERATURE["low"]), 1, dealt=16)
    assert sp.tail.throughput.tau(1) < BASE.throughput.tau(1)


def test_mixed_curve_is_between_its_ends() -> None:
    seer = LITERATURE["seer"]
    for f in (0.0, 0.3, 1.0):
        m = mixed_curve(seer, f)
        assert seer.tau(1) - 1e-12 <= m.tau(8) <= seer.tau(8) + 1e-12
    assert mixed_curve(seer, 0.0).tau(8) == pytest.approx(seer.tau(8))
    assert mixed_curve(seer, 1.0).tau(8) == pytest.approx(seer.tau(1))


def test_offsite_meter_counts_tokens_away_from_the_groups_servers() -> None:
    import numpy as np
    meter = OffsiteMeter()
    # two requests of one group (n = 2), both dealt to replica 0; the second moved to 1
    meter.observe(np.array([0, 0]), 2, [[(0, 0, 10)], [(0, 0, 4), (1, 4, 10)]])
    assert meter.fraction == pytest.approx(6 / 20)


@given(seed=st.integers(0, 50), mode=st.sampled_from(["auto", "group"]),
       preset=st.sampled_from(["seer", "low"]))
@settings(max_examples=6, deadline=None)
def test_every_group_is_delivered_once_and_whole_with_spec_placement(
        seed: int, mode: str, preset: str) -> None:
    settings_, ids, wl = _setup(seed, groups=6, replicas=3, steps=6)
    res = run_spec_variants(settings_, ids, wl, BASE, LITERATURE[preset],  # type: ignore[arg-type]
                            variants=("tailsieve",), colocate=mode)
    for name, run in res.runs.items():
        delivered = Counter(pid for r in run.run.records for pid in r.delivered_ids)
        assert all(c == 1 for c in delivered.values()), name
        for r in run.run.records:
            assert all(size == 8 for size in r.delivered_sizes), name
        drawn = {pid for r in run.run.regular for pid in r.drawn_ids}
        assert drawn <= set(delivered) | {pid for r in run.run.records for pid in r.aborted_ids}
    if preset == "seer" and mode == "group":
        assert res.colocation.dealing == "group" and "tailsieve-grouped" in res.runs
        assert 0.0 <= res.offsite_fraction <= 1.0


def test_python_api_and_cli_reach_the_spec_simulation() -> None:
    res = simulate_spec("paper-math", spec="low", replicas=4, groups=6, steps=6)
    assert {"uniform-requests", "uniform-requests-nospec", "tailsieve", "seer-oracle"} <= \
        set(res.speedups)
    assert res.speedups["uniform-requests"] == pytest.approx(1.0)
    out = CliRunner().invoke(app, ["simulate", "--spec", "seer", "--spec-price", "2",
                                   "--replicas", "4", "--groups", "6", "--steps", "6",
                                   "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["settings"]["spec"] == "seer" and data["settings"]["spec_price"] == 2.0
    assert data["colocation"][0]["dealing"] in ("spread", "group")
    bad = CliRunner().invoke(app, ["simulate", "--spec", "no-such-preset"])
    assert bad.exit_code != 0


def test_priced_moves_leave_fewer_tokens_away_from_their_siblings() -> None:
    settings_, ids, wl = _setup(1, groups=8, replicas=4, steps=7)
    seer = LITERATURE["seer"]
    priced = run_spec_variants(settings_, ids, wl, BASE, seer,  # type: ignore[arg-type]
                               variants=("tailsieve",), colocate="group")
    unpriced = run_spec_variants(settings_, ids, wl, BASE, seer,  # type: ignore[arg-type]
                                 variants=("tailsieve",), colocate="group",
                                 price_drafts=False)
    assert unpriced.offsite_fraction > 0.0
    assert priced.offsite_fraction < unpriced.offsite_fraction


def test_forced_whole_groups_run_whole_groups_for_any_source() -> None:
    settings_, ids, wl = _setup(2, groups=6, replicas=3, steps=6)
    res = run_spec_variants(settings_, ids, wl, BASE, LITERATURE["low"],  # type: ignore[arg-type]
                            variants=("tailsieve",), colocate="group")
    assert res.colocation.dealing == "group"
    assert res.runs["tailsieve"] is res.runs["tailsieve-grouped"]
