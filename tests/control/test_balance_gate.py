"""The balance gate (``control.balance_gate``): balance an m = 0 step only while balanced steps
are measured faster than round-robin ones, on the model's observed/predicted yardstick."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.control.balance_gate import BalanceGate, GateConfig
from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.control.hierarchical import HierarchicalController
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import SimSettings, epoch_prompt_ids, run_policies
from tailsieve.sim.movepath import PieceSettings
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.workloads import resolve_workload

GPU4B = load_profile("qwen3-4b-h100")


def drive(gate: BalanceGate, balanced_ratio: float, rr_ratio: float, steps: int) -> list[bool]:
    """Run ``steps`` m = 0 steps, each with the ratio of the mode the gate chose."""
    modes = []
    for _ in range(steps):
        b = gate.balances_next()
        modes.append(b)
        gate.observe(b, balanced_ratio if b else rr_ratio)
    return modes


def test_the_second_step_and_one_in_refresh_every_calibrate_round_robin() -> None:
    gate = BalanceGate(GateConfig(refresh_every=5))
    modes = drive(gate, 0.9, 1.0, 12)  # balancing pays: it stays on
    assert modes == [True, False, True, True, True, True, False, True, True, True, True, False]
    assert gate.state.on


def test_balancing_that_does_not_beat_round_robin_is_switched_off_and_probed() -> None:
    gate = BalanceGate(GateConfig(min_balanced=3, probe_every=4, refresh_every=100))
    modes = drive(gate, 1.02, 1.0, 3)
    assert modes == [True, False, True]
    assert gate.state.on  # two balanced ratios: not enough to decide
    b = gate.balances_next()
    assert b
    note = gate.observe(b, 1.02)
    assert "balancing off" in note and "1.020" in note
    assert not gate.state.on
    modes = drive(gate, 1.02, 1.0, 12)  # steps 4..15: only multiples of probe_every balance
    assert [s for s, m in enumerate(modes, start=4) if m] == [4, 8, 12]
    # the tail grows strong: the probes turn it back on once the window's mean drops
    flips = []
    for _ in range(40):
        b = gate.balances_next()
        flips.append(gate.observe(b, 0.8 if b else 1.0))
        if gate.state.on:
            break
    assert gate.state.on and "balancing on" in flips[-1]


def test_the_comparison_uses_the_recent_windows() -> None:
    gate = BalanceGate(GateConfig(window=2, min_balanced=1, refresh_every=100))
    gate.observe(True, 0.5)
    gate.observe(False, 1.0)
    assert gate.state.on
    gate.observe(True, 1.2)
    gate.observe(True, 1.2)  # 0.5 left the window of 2
    assert not gate.state.on
    assert gate.round_robin_ratio() == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.5, 1.5), min_size=1, max_size=80),
       st.integers(1, 6), st.integers(1, 5), st.integers(1, 6), st.integers(2, 9))
def test_the_gate_matches_a_brute_force_reading_of_its_windows(
    ratios: list[float], window: int, min_balanced: int, probe: int, refresh: int
) -> None:
    cfg = GateConfig(window=window, min_balanced=min_balanced, probe_every=probe,
                     refresh_every=refresh)
    gate = BalanceGate(cfg)
    bal: list[float] = []
    rr: list[float] = []
    on = True
    for s, ratio in enumerate(ratios):
        b = gate.balances_next()
        if s % refresh == 1:
            assert not b  # a calibration step never balances
        elif on:
            assert b
        else:
            assert b == (s % probe == 0)  # while off, only the probes balance
        gate.observe(b, ratio)
        (bal if b else rr).append(ratio)
        if rr and len(bal[-window:]) >= min_balanced:
            on = sum(bal[-window:]) / len(bal[-window:]) < sum(rr[-window:]) / len(rr[-window:])
        assert gate.state.on == on


def test_gate_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="probe_every"):
        GateConfig(probe_every=0)
    with pytest.raises(ConfigError, match="refresh_every"):
        GateConfig(refresh_every=1)


def test_the_controller_skips_balancing_while_the_gate_is_off_and_checkpoints_it() -> None:
    cfg = ControllerConfig(num_groups=16, num_replicas=4)
    ctl = make_controller("tailsieve", cfg, GPU4B)
    assert isinstance(ctl, HierarchicalController)
    assert ctl.targets().balance is not None  # the first m = 0 step balances
    ctl.gate.state.num_m0 = 1
    assert ctl.targets().balance is None  # the second one calibrates round-robin
    ctl.gate.state.num_m0, ctl.gate.state.on = 3, False
    assert ctl.targets().balance is None
    again = make_controller("tailsieve", cfg, GPU4B)
    again.load_state_dict(ctl.state_dict())
    assert again.targets() == ctl.targets() and not again.gate.state.on
    ungated = make_controller("tailsieve", ControllerConfig(num_groups=16, num_replicas=4,
                                                            gate=None), GPU4B)
    ungated.state.gate.num_m0 = 1
    assert ungated.targets().balance is not None


def test_weak_tail_with_pieces_falls_back_to_round_robin_step_for_step() -> None:
    """With vLLM-like pieces (512 tokens, 50 ms seams) on a weak tail, balanced steps are no
    faster than round-robin: the gate switches balancing off, and an unbalanced step is
    uniform-requests' step exactly (same dealing, no pieces)."""
    pools = PoolConfigs.single(ReplicaConfig.from_profile(GPU4B))
    wl = resolve_workload("paper-math", "weak", seed=0)
    s = SimSettings(num_replicas=8, num_groups=64, group_size=8, num_steps=12, seed=0,
                    pieces=PieceSettings(512, 0.05))
    runs = run_policies(["uniform-requests", "tailsieve"], s,
                        lambda: epoch_prompt_ids(wl.prompt_ids(), 0), wl, pools)
    ur = {r.step: r.makespan_s for r in runs["uniform-requests"].run.regular}
    ts = runs["tailsieve"].run.regular
    assert all(r.diagnostics is not None for r in ts)
    unbalanced = [r for r in ts if r.diagnostics is not None and not r.diagnostics.balanced]
    assert 1 in {r.step for r in unbalanced}  # the calibration step
    assert len(unbalanced) >= 4  # the gate switched balancing off
    for r in unbalanced:
        assert r.diagnostics is not None and r.diagnostics.num_moves == 0
        assert r.makespan_s == pytest.approx(ur[r.step], rel=1e-9)
    assert any(r.diagnostics is not None and r.diagnostics.num_moves > 0 for r in ts)
    proto = runs["tailsieve"].protocol
    assert proto is not None and isinstance(proto.controller, HierarchicalController)
    assert not proto.controller.gate.state.on
