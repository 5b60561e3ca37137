"""``PaceWindows``: the balance gate fed from windows of turns (the proxy has no steps)."""

from __future__ import annotations

import pytest

from tailsieve.control.balance_gate import BalanceGate, GateConfig
from tailsieve.control.pace_window import PaceWindows
from tailsieve.errors import ConfigError


def _run_window(w: PaceWindows, s_per_token: dict[bool, float], turns: int = 4) -> bool:
    """Start a window's turns, end them at the mode's pace; returns the window's mode."""
    started = [w.turn_started()[0] for _ in range(turns)]
    mode = w.balanced
    for win in started:
        w.turn_ended(win, 100 * s_per_token[mode], 100)
    return mode


def test_moves_switch_off_where_slower_and_back_on_where_faster() -> None:
    gate = BalanceGate(GateConfig(window=4, min_balanced=2, probe_every=3, refresh_every=8))
    w = PaceWindows(gate, turns_per_window=4)
    slow_moves = {True: 0.02, False: 0.01}
    modes = [_run_window(w, slow_moves) for _ in range(8)]
    assert modes[:2] == [True, False]  # the gate's calibration window runs without moves
    assert not gate.state.on  # windows with moves measured slower: off
    off_modes = modes[4:]
    assert off_modes.count(True) <= 2  # while off, only the gate's probes move
    fast_moves = {True: 0.005, False: 0.01}
    modes = [_run_window(w, fast_moves) for _ in range(12)]
    assert gate.state.on and modes[-1]  # the probes measured moves faster: on again


def test_a_window_is_fed_once_when_its_last_turn_ends() -> None:
    gate = BalanceGate()
    w = PaceWindows(gate, turns_per_window=2)
    a, _ = w.turn_started()
    b, _ = w.turn_started()
    assert a == b == 0
    c, _ = w.turn_started()  # the window is full: the next one opens
    assert c == 1
    w.turn_ended(a, 1.0, 10)
    assert gate.state.num_m0 == 0  # one turn of window 0 still runs
    w.turn_ended(b, 3.0, None)  # failed: not timed, but it ended
    assert gate.state.balanced == [pytest.approx(0.1)] and gate.state.num_m0 == 1
    w.turn_ended(c, 1.0, 10)
    assert gate.state.num_m0 == 1  # window 1 is still open
    with pytest.raises(ConfigError, match="window"):
        w.turn_ended(0, 1.0, 10)
    with pytest.raises(ConfigError, match="turns_per_window"):
        PaceWindows(gate, 0)


def test_a_window_that_ended_before_it_closed_is_fed_when_it_closes() -> None:
    gate = BalanceGate()
    w = PaceWindows(gate, turns_per_window=1)
    a, _ = w.turn_started()
    w.turn_ended(a, 2.0, 10)
    assert gate.state.num_m0 == 0
    w.turn_started()
    assert gate.state.balanced == [pytest.approx(0.2)]
