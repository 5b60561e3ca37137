"""The balance gate fed without steps: windows of turns stand in for steps (pure).

A front door without rollout steps (the HTTP proxy: requests arrive as the client sends them)
still has to learn whether moving running turns pays. It cuts its stream of turns into
windows of ``turns_per_window`` turns, in the order they start. Each window runs in one mode,
the gate's decision for its next "step" (``BalanceGate.balances_next``: moves on, or off for
the gate's round-robin calibration and while moves are measured slower), and when every turn
of it has ended its pace, the seconds per output token of its turns together (their summed
wall times over their summed output tokens), is fed to the gate as that step's ratio. So
the gate compares windows of turns run with moves against windows run without, as it
compares steps; it switches moves off where the windows with moves are slower and, through its
probe windows, back on when they pay again. The mode changes when the next window opens: a
window's turns still running then are timed with their window but move (or not) in the new
mode, which blurs the two modes' paces near the seams; windows much longer than a turn keep
that small. No clock: callers pass durations.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailsieve.control.balance_gate import BalanceGate
from tailsieve.errors import ConfigError

__all__ = ["PaceWindows"]


@dataclass(slots=True)
class _Window:
    balanced: bool  # moves were on for the turns that started in it
    num_started: int = 0
    num_ended: int = 0
    sum_s: float = 0.0  # wall seconds of its ended turns
    sum_tokens: int = 0  # output tokens of its ended turns


class PaceWindows:
    """Windows of turns for the balance gate (see the module docstring)."""

    def __init__(self, gate: BalanceGate, turns_per_window: int = 256) -> None:
        if turns_per_window < 1:
            raise ConfigError(f"turns_per_window must be >= 1, got {turns_per_window}")
        self.gate = gate
        self.turns_per_window = turns_per_window
        self._windows: dict[int, _Window] = {0: _Window(gate.balances_next())}
        self._current = 0

    @property
    def balanced(self) -> bool:
        """Whether turns starting now may move (the open window's mode)."""
        return self._windows[self._current].balanced

    def turn_started(self) -> tuple[int, str]:
        """A turn starts: the window it belongs to (pass it to ``turn_ended``), and the
        gate's note when its decision flips ("" otherwise). A window full of turns closes for
        new ones; the next opens in the gate's next mode."""
        note = ""
        w = self._windows[self._current]
        if w.num_started >= self.turns_per_window:
            closed = self._current
            self._current += 1
            note = self._observe(closed)
            w = self._windows[self._current] = _Window(self.gate.balances_next())
        w.num_started += 1
        return self._current, note

    def turn_ended(self, window: int, duration_s: float, output_tokens: int | None) -> str:
        """The turn of ``window`` ended after ``duration_s`` with ``output_tokens`` (None: it
        failed or was cut short, not timed). When it was its closed window's last, the
        window's pace goes to the gate; returns the gate's note when its decision flips."""
        w = self._windows.get(window)
        if w is None:
            raise ConfigError(f"no open window {window}")
        w.num_ended += 1
        if output_tokens is not None and output_tokens > 0 and duration_s >= 0:
            w.sum_s += duration_s
            w.sum_tokens += output_tokens
        return self._observe(window)

    def _observe(self, window: int) -> str:
        """Feed a closed window whose turns all ended to the gate."""
        w = self._windows[window]
        if window == self._current or w.num_ended < w.num_started:
            return ""
        del self._windows[window]
        if w.sum_tokens == 0:
            return ""
        return self.gate.observe(w.balanced, w.sum_s / w.sum_tokens)
