"""How TailSieve's session routing prices a turn (validated; pure data)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailsieve.errors import ConfigError

__all__ = ["SessionSettings"]


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """The knobs of ``place_turn`` (``tailsieve.session.priced``)."""

    move_margin: float = 2.0  # move only if the predicted saving > margin x the move's extra
    # prefill (and its seam)
    seam_s: float = 0.1  # fixed cost of leaving home at a boundary, s: a move must save this
    # much more than its prefill (docs/agentic-rollouts.md, "The seam on leaving home")
    horizon_s: float = 30.0  # expected remaining step time when there is no estimate, s
    expected_step_s: float = 0.0  # the controller's step-time estimate (0: unknown)
    turn_tokens: float = 512.0  # expected output tokens of a turn until some are observed
    tool_wait_weight: float = 1.0  # weight of a session in a tool call in its replica's
    # expected load (it comes back to its home when the tool returns)
    moves: bool = True  # False: sessions stay home (first turns are still placed by price)
    group_price: bool = True  # a first turn pays the tail its group's siblings stack on a
    # replica (``session.group_price``); False: only the prefill the cache saves is priced
    group_share: float = 0.5  # share of a trajectory's work variance its group explains
    work_cv: float = 1.0  # coefficient of variation of a trajectory's work

    def __post_init__(self) -> None:
        for name in ("move_margin", "seam_s", "horizon_s", "expected_step_s", "turn_tokens",
                     "tool_wait_weight", "work_cv"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0:
                raise ConfigError(f"session {name} must be a finite number >= 0, got {v!r}")
        if not 0 <= self.group_share <= 1:
            raise ConfigError(f"session group_share must be in [0, 1], got {self.group_share!r}")
        if self.turn_tokens <= 0:
            raise ConfigError(f"session turn_tokens must be > 0, got {self.turn_tokens}")

    def horizon_at(self, elapsed_s: float) -> float:
        """Expected remaining step time at ``elapsed_s``: the controller's estimate less the
        time spent (``horizon_s`` without one), never below the time spent so far (a
        heavy-tailed step that has run for ``t`` is expected to run on for about as long),
        as ``core.balancer.BalanceSettings.horizon_at``."""
        left = (self.expected_step_s - elapsed_s if self.expected_step_s > 0
                else self.horizon_s)
        return max(left, elapsed_s, 0.0)
