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
from tailsieve.model.acceptance import LITERATURE, AcceptanceCurve
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.sim import executor as sim_executor
from tailsieve.sim.driver import PolicyRun, SimSettings, epoch_prompt_ids, run_policies
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.spec_api import simulate_spec
from tailsieve.sim.spec_runs import OffsiteMeter, mixed_curve, run_spec_variants, spec_pools
from tailsieve.sim.workloads import resolve_workload

BASE = ReplicaConfig.from_profile(load_profile("qwen3-4b-h100"))
TREE = AcceptanceCurve("srv", "suffix-siblings", ((1, 1.5), (8, 3.0)), placement="server")


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


def _points(pools: PoolConfigs) -> list[float]:
    return [p.step_s for p in pools.bulk.throughput.points]


def test_the_baseline_speculates_under_the_same_batch_size_gate_as_tailsieve() -> None:
    settings_, ids, wl = _setup(3, groups=6, replicas=3, steps=6)
    # prompt-lookup level with a wide draft: pays below 26 running on this profile
    curve = AcceptanceCurve("wide", "ngram", ((1, 1.1),), ((1, 4.45),))
    res = run_spec_variants(settings_, ids, wl, BASE, curve,  # type: ignore[arg-type]
                            variants=("uniform-requests", "uniform-requests-ungated",
                                      "tailsieve"))
    base, ungated = res.pools["uniform-requests"], res.pools["uniform-requests-ungated"]
    assert _points(base) == _points(res.pools["tailsieve"])  # one gate for both
    # where the wide verify forward costs more than it saves, the baseline decodes plainly
    plain = PoolConfigs.single(BASE).bulk.throughput
    b = len(base.bulk.throughput.points)
    assert base.bulk.throughput.tau(b) < ungated.bulk.throughput.tau(b)
    assert base.bulk.throughput.tau(1) < plain.tau(1)  # and speculates in the tail


@pytest.mark.parametrize("name", ["seer", "tlt-eagle-tree"])
def test_a_group_drafter_or_eagle_gains_nothing_from_placement(name: str) -> None:
    """Seer's group drafter sees every sibling wherever it runs; EAGLE/MTP drafts from a
    model: round-robin requests, whole groups and TailSieve all get the same acceptance, and
    TailSieve never deals whole groups for it."""
    settings_, ids, wl = _setup(4, groups=6, replicas=3, steps=6)
    res = run_spec_variants(settings_, ids, wl, BASE, LITERATURE[name],  # type: ignore[arg-type]
                            variants=("uniform-requests", "uniform-spec", "tailsieve"))
    assert _points(res.pools["uniform-requests"]) == _points(res.pools["uniform-spec"])
    assert res.colocation.dealing == "spread" and "tailsieve-grouped" not in res.runs


def test_a_server_tree_gains_from_finished_co_located_siblings_only() -> None:
    """vLLM suffix: k siblings on one server help once they have finished there, so whole
    groups are priced faster than spread ones only as the replica drains."""
    settings_, ids, wl = _setup(5, groups=6, replicas=3, steps=6)
    res = run_spec_variants(settings_, ids, wl, BASE, TREE,  # type: ignore[arg-type]
                            variants=("uniform-requests", "uniform-spec"))
    spread = res.pools["uniform-requests"].bulk.throughput
    whole = res.pools["uniform-spec"].bulk.throughput
    dealt = 6 * 8 // 3

    def at_ref(model: ThroughputModel, b: int) -> float:  # seconds per token, 2,048 held each
        return model.step_s(float(b), b * 2048.0)

    assert at_ref(whole, dealt) == pytest.approx(at_ref(spread, dealt))  # none finished yet
    assert at_ref(whole, 1) < at_ref(spread, 1)  # nearly all siblings finished on this server


def test_moves_are_metered_through_a_parameter_not_a_patched_global() -> None:
    before = sim_executor.simulate_with_moves
    settings_, ids, wl = _setup(6, groups=6, replicas=3, steps=6)
    meter = OffsiteMeter()
    runs = run_policies(["tailsieve"], settings_, ids, wl,  # type: ignore[arg-type]
                        PoolConfigs.single(BASE), move_hook=meter)
    assert sim_executor.simulate_with_moves is before
    balanced = sum(1 for r in runs["tailsieve"].run.records if r.step > 0)
    assert len(meter.per_step) == balanced > 0 and meter.total_tokens > 0
    assert meter.fraction == 0.0 or meter.offsite_tokens > 0


def test_mixed_curve_is_between_its_ends() -> None:
    seer = TREE
    for f in (0.0, 0.3, 1.0):
        m = mixed_curve(seer, f)
        assert seer.tau(1) - 1e-12 <= m.tau(8) <= seer.tau(8) + 1e-12
    assert mixed_curve(seer, 0.0).tau(8) == pytest.approx(seer.tau(8))
    assert mixed_curve(seer, 1.0).tau(8) == pytest.approx(seer.tau(1))


def test_offsite_meter_counts_tokens_away_from_the_groups_servers() -> None:
    import numpy as np
    meter = OffsiteMeter()
    # two requests of one group (n = 2), both dealt to replica 0; the second moved to 1
    meter.count(np.array([0, 0]), 2, [[(0, 0, 10)], [(0, 0, 4), (1, 4, 10)]])
    assert meter.fraction == pytest.approx(6 / 20)


@given(seed=st.integers(0, 50), mode=st.sampled_from(["auto", "group"]),
       preset=st.sampled_from(["tree", "low"]))
@settings(max_examples=6, deadline=None)
def test_every_group_is_delivered_once_and_whole_with_spec_placement(
        seed: int, mode: str, preset: str) -> None:
    settings_, ids, wl = _setup(seed, groups=6, replicas=3, steps=6)
    curve = TREE if preset == "tree" else LITERATURE[preset]
    res = run_spec_variants(settings_, ids, wl, BASE, curve,  # type: ignore[arg-type]
                            variants=("tailsieve",), colocate=mode)
    for name, run in res.runs.items():
        delivered = Counter(pid for r in run.run.records for pid in r.delivered_ids)
        assert all(c == 1 for c in delivered.values()), name
        for r in run.run.records:
            assert all(size == 8 for size in r.delivered_sizes), name
        drawn = {pid for r in run.run.regular for pid in r.drawn_ids}
        assert drawn <= set(delivered) | {pid for r in run.run.records for pid in r.aborted_ids}
    if preset == "tree" and mode == "group":
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
    seer = TREE
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
