"""A router's answer for one turn."""

from __future__ import annotations

from dataclasses import dataclass

from tailsieve.errors import ConfigError

__all__ = ["REASONS", "TurnDecision"]

REASONS: tuple[str, ...] = ("first", "stay", "move", "home-down")


@dataclass(frozen=True, slots=True)
class TurnDecision:
    """Where a turn runs, and why."""

    replica: int
    moved: bool  # replica != home (False for a first turn)
    prefill_tokens: int  # tokens to prefill there (context - cached there)
    predicted_gain_s: float  # predicted step time saved vs staying home, net of the move's
    # cost (0 when it stays)
    reason: str  # "first" | "stay" | "move" | "home-down"
    saving_s: float = 0.0  # of a move: the predicted step time saved, before its cost
    move_prefill_s: float = 0.0  # of a move: the extra prefill it costs over staying, s

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ConfigError(f"decision reason must be one of {REASONS}, got {self.reason!r}")
        if self.replica < 0 or self.prefill_tokens < 0:
            raise ConfigError("decision replica and prefill_tokens must be >= 0")
