"""The simulator records each planned move as the live rebalancer does: its candidate, gain and
decision after pricing, and when it took effect."""

from __future__ import annotations

from plan_helpers import Placement, build_plan
from tailsieve.core.balance_drafts import DraftPricing
from tailsieve.core.balance_trace import DEFERRED, MADE, SKIPPED, BalanceTrace
from tailsieve.core.balancer import BalanceSettings
from tailsieve.model.acceptance import AcceptanceCurve
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.layout import RequestLayout
from tailsieve.sim.movepath import PieceSettings, simulate_with_moves

CFG = ReplicaConfig.from_profile(load_profile("qwen3-4b-h100"), max_num_seqs=None,
                                 kv_capacity_tokens=None)
BAL = BalanceSettings(interval_s=1.0, horizon_s=200.0, seam_s=0.05)


def _piled() -> RequestLayout:
    # one group of 6 long responses whole on replica 0, one of 6 short ones on replica 1
    plan = build_plan(1, 2, 6, [Placement("a", 0), Placement("b", 1)])
    table = {"a": [20_000] * 6, "b": [100] * 6}
    return RequestLayout.build(plan, lambda pid, step: table[pid])


def test_moves_pricing_skips_are_recorded_as_skipped_not_made() -> None:
    layout = _piled()
    steep = AcceptanceCurve("steep", "suffix-siblings", ((1, 1.0), (6, 9.0)), max_spec_tokens=8,
                            placement="server")
    rho = DraftPricing(steep).for_dealing(layout.request_replica.tolist(), layout.group_size)
    trace = BalanceTrace()
    _, stats = simulate_with_moves(layout, [CFG, CFG], 2, BAL, trace=trace, draft_factor=rho)
    moves = trace.moves
    assert moves and {m.decision for m in moves} == {SKIPPED}
    assert trace.num_made == 0 == stats.num_moves == trace.num_effective
    assert all(m.response[0] == "a" and (m.src, m.dst) == (0, 1) for m in moves)


def test_moves_made_at_once_or_deferred_take_effect_where_the_simulator_counts_them() -> None:
    for pieces, decision in ((None, MADE), (PieceSettings(512, 0.01), DEFERRED)):
        trace = BalanceTrace()
        _, stats = simulate_with_moves(_piled(), [CFG, CFG], 2, BAL, trace=trace, pieces=pieces)
        moves = trace.moves
        assert moves and {m.decision for m in moves} == {decision}
        took = [m for m in moves if m.effective_s is not None]
        assert len(took) == trace.num_effective == stats.num_moves >= 1
        for c in trace.checks:
            for m in c.moves:
                assert m.response[0] == "a" and m.gain_s > 0
                if m.effective_s is not None:
                    assert m.effective_s >= c.t_s + (BAL.seam_s if pieces is None else 0.0)
