"""The balance gate: re-balance a step only while balancing is measured to beat round-robin.

Moves cost something even when none is made: on vLLM without streaming a balanced step runs
its responses as bounded pieces, and every piece end delays its response by a seam. Where the
imbalance left by round-robin is small (a weak tail, a flat decode curve) that cost can exceed
what the moves gain. The gate measures both modes on the controller's own yardstick, the ratio
of a step's observed time to the round-robin time the throughput model predicts for the
step's own delivered lengths (the same prediction for both, so model error cancels):

- *balanced* ratios come from m = 0 steps that re-balanced (moves, pieces and seams included);
- *round-robin* ratios from m = 0 steps that did not: the second m = 0 step, then one in every
  ``refresh_every`` (the calibration, kept fresh as lengths drift).

Once it holds at least one round-robin and ``min_balanced`` balanced ratios, balancing stays on
while the mean of the last ``window`` balanced ratios is below the mean of the last ``window``
round-robin ones. While it is off, one m = 0 step in every ``probe_every`` still re-balances,
so a tail that grows strong turns it back on. Lengths are never predicted: only whole steps
are timed. Pure: no clock, no I/O; its state is saved with the controller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tailsieve.errors import ConfigError


@dataclass(frozen=True, slots=True)
class GateConfig:
    """How the balance gate samples the two modes."""

    window: int = 8  # recent ratios of each mode averaged
    min_balanced: int = 3  # balanced ratios needed before the gate may switch balancing off
    probe_every: int = 8  # while off, one m = 0 step in this many re-balances
    refresh_every: int = 32  # one m = 0 step in this many runs round-robin (calibration)

    def __post_init__(self) -> None:
        for name in ("window", "min_balanced", "probe_every", "refresh_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"gate {name} must be >= 1, got {getattr(self, name)}")
        if self.refresh_every < 2:
            raise ConfigError(f"gate refresh_every must be >= 2, got {self.refresh_every}")


@dataclass(slots=True)
class GateState:
    """What the gate remembers (saved with the controller's checkpoint)."""

    balanced: list[float] = field(default_factory=list)  # observed/predicted, balanced steps
    round_robin: list[float] = field(default_factory=list)  # observed/predicted, round-robin
    num_m0: int = 0  # clean m = 0 steps observed
    on: bool = True  # balancing measured to pay (or not yet measured)


class BalanceGate:
    """Decides whether the next m = 0 step re-balances, from the ratios it was shown."""

    def __init__(self, config: GateConfig | None = None, state: GateState | None = None) -> None:
        """``state``: the object the gate records into (a controller's, saved with it)."""
        self.config = config or GateConfig()
        self.state = state if state is not None else GateState()

    def balances_next(self) -> bool:
        """Whether the next m = 0 step re-balances."""
        cfg, st = self.config, self.state
        s = st.num_m0
        if s % cfg.refresh_every == 1:
            return False
        return st.on or s % cfg.probe_every == 0

    def observe(self, balanced: bool, ratio: float) -> str:
        """Record a clean m = 0 step's observed/predicted step time; returns a note when the
        decision flips ("" otherwise)."""
        cfg, st = self.config, self.state
        st.num_m0 += 1
        kept = st.balanced if balanced else st.round_robin
        kept.append(ratio)
        del kept[: max(0, len(kept) - cfg.window)]
        if not st.round_robin or len(st.balanced) < cfg.min_balanced:
            return ""
        bal = sum(st.balanced) / len(st.balanced)
        rr = sum(st.round_robin) / len(st.round_robin)
        on = bal < rr
        if on == st.on:
            return ""
        st.on = on
        verb = "on" if on else "off"
        return (f"balancing {verb} (observed/predicted: balanced {bal:.3f}, "
                f"round-robin {rr:.3f})")

    def round_robin_ratio(self) -> float | None:
        """Mean observed/predicted step time of the recent round-robin steps (None: none)."""
        rr = self.state.round_robin
        return sum(rr) / len(rr) if rr else None
