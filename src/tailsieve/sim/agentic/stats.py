"""What one simulated agentic step measured."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["StepStats"]


@dataclass(slots=True)
class StepStats:
    """Counts and times of one step (tokens are prompt tokens of turns unless named)."""

    step_s: float = 0.0  # when the last trajectory of the step finished, seconds
    num_trajectories: int = 0
    num_turns: int = 0
    prompt_tokens: int = 0  # every turn's whole prompt (context), summed
    cached_tokens: int = 0  # of them, found in the chosen replica's prefix cache
    prefilled_tokens: int = 0  # of them, prefilled (prompt - cached)
    reprefilled_tokens: int = 0  # prefilled although computed before (prefilled - new tokens)
    boundary_moves: int = 0  # turns placed away from the replica of the session's last turn
    midturn_moves: int = 0  # running turns moved by continuation
    midturn_prefill_tokens: int = 0  # prefix tokens those continuations prefilled
    checks: int = 0  # mid-turn re-balance checks
    preemptions: int = 0  # requests the engines preempted for lack of KV space
    recomputed_tokens: int = 0  # tokens recomputed after preemptions
    moves_on: bool = True  # the balance gate let this step move (TailSieve)

    @property
    def hit_rate(self) -> float:
        """Prefix-cache hit rate in tokens (cached / prompt), as vLLM reports it."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["hit_rate"] = self.hit_rate
        return out
