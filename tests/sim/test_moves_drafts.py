"""Moves priced by their sibling drafts on a constructed step (``core.balance_drafts``)."""

from __future__ import annotations

from plan_helpers import Placement, build_plan
from tailsieve.core.balance_drafts import DraftPricing
from tailsieve.core.balancer import BalanceSettings
from tailsieve.model.acceptance import LITERATURE, AcceptanceCurve
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.layout import RequestLayout
from tailsieve.sim.movepath import simulate_with_moves

CFG = ReplicaConfig.from_profile(load_profile("qwen3-4b-h100"), max_num_seqs=None,
                                 kv_capacity_tokens=None)


def _run(curve: AcceptanceCurve | None) -> tuple[int, float]:
    # one group of 6 long responses whole on replica 0, one of 6 short ones on replica 1
    plan = build_plan(1, 2, 6, [Placement("a", 0), Placement("b", 1)])
    table = {"a": [20_000] * 6, "b": [100] * 6}
    layout = RequestLayout.build(plan, lambda pid, step: table[pid])
    bal = BalanceSettings(interval_s=1.0, horizon_s=200.0, seam_s=0.05)
    rho = None if curve is None else DraftPricing(curve).for_dealing(
        layout.request_replica.tolist(), layout.group_size)
    res, stats = simulate_with_moves(layout, [CFG, CFG], plan.num_fresh_to_deliver, bal,
                                     draft_factor=rho)
    assert sorted(res.done_s.shape) == [12]  # every response finished
    return stats.num_moves, float(res.done_s.max())


def test_moves_to_an_idle_server_survive_moderate_draft_loss() -> None:
    free, _ = _run(None)
    tree = AcceptanceCurve("srv", "suffix-siblings", ((1, 1.5), (8, 3.0)), placement="server")
    seer, _ = _run(tree)
    assert free >= 2
    assert 1 <= seer <= free


def test_moves_that_would_lose_most_drafts_are_skipped() -> None:
    steep = AcceptanceCurve("steep", "suffix-siblings", ((1, 1.0), (6, 9.0)), max_spec_tokens=8,
                            placement="server")
    moves, _ = _run(steep)
    assert moves == 0


def test_sources_that_ignore_placement_move_as_before() -> None:
    assert _run(LITERATURE["tlt-eagle-tree"]) == _run(None)
    assert _run(LITERATURE["seer"]) == _run(None)
