"""A record of every re-balance check of a step: what it saw and what it decided (pure).

The simulator (``sim.movepath``) and the live rebalancer (``runtime.step.rebalancer``) call the same
planner (``core.balance_check.plan_check``) on ``ReplicaLoad`` s they build each in their own
way. A ``BalanceTrace`` given to either records, per check, the inputs the planner saw (per
replica: running responses and context tokens; the horizon and seam) and, per planned move, the
same quantities on both sides: the candidate (response, source, destination, prefix), its
predicted gain and the decision, taken at the same point (after pricing, as the executor
answered):

- ``made``: made at once (the running piece stopped; the next piece goes to the destination);
- ``deferred``: made, waiting for the running piece's end (vLLM's unstreamed pieces);
- ``skipped``: pricing skipped it (the simulator's: the sibling drafts it loses, or a dropped
  piece's age it does not cover);
- ``refused``: the executor declined (the response completed or its group stopped meanwhile);

and later whether it took effect (the response's next piece began on the destination, with
when). ``core.trace_compare`` pairs a live step's checks with the simulator's replay of the
same plan and reports where they part: the first check whose view of the state, candidates,
gains or decisions differ, and every such check.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from tailsieve.core.balancer import Move, ReplicaLoad
from tailsieve.errors import ConfigError

__all__ = ["DECISIONS", "DEFERRED", "MADE", "REFUSED", "SKIPPED", "BalanceTrace", "CheckRecord",
           "MoveRecord"]

MADE = "made"
DEFERRED = "deferred"
SKIPPED = "skipped"
REFUSED = "refused"
DECISIONS = (MADE, DEFERRED, SKIPPED, REFUSED)
Response = tuple[str, int]  # (prompt id, sample): the key a response is known by on both sides


@dataclass(slots=True)
class MoveRecord:
    """One planned move of a check and what became of it."""

    response: Response
    src: int
    dst: int
    prefix_tokens: int  # context the continuation carries
    gain_s: float  # the planner's predicted gain, net of the move's cost, seconds
    decision: str  # one of ``DECISIONS``
    effective_s: float | None = None  # when its next piece began on ``dst`` (None: never)

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ConfigError(f"move decision {self.decision!r} is not one of {DECISIONS}")

    @classmethod
    def of(cls, mv: Move, response: Hashable, decision: str) -> MoveRecord:
        pid, sample = cast(Response, response)
        return cls((str(pid), int(sample)), mv.src, mv.dst, mv.prefix_tokens,
                   mv.predicted_gain_s, decision)

    @property
    def made(self) -> bool:
        """Made, at once or deferred (what each side counts as a move asked for)."""
        return self.decision in (MADE, DEFERRED)

    @property
    def candidate(self) -> tuple[Response, int, int]:
        return self.response, self.src, self.dst

    def as_dict(self) -> dict[str, Any]:
        return {"response": list(self.response), "src": self.src, "dst": self.dst,
                "prefix_tokens": self.prefix_tokens, "gain_s": round(self.gain_s, 4),
                "decision": self.decision, "effective_s": None if self.effective_s is None
                else round(self.effective_s, 4)}


@dataclass(frozen=True, slots=True)
class CheckRecord:
    """One check: its time on the step's clock, the loads it read, its moves."""

    t_s: float
    num_running: tuple[int, ...]  # per replica (in the order of ``replicas``)
    context_tokens: tuple[float, ...]
    replicas: tuple[int, ...]
    horizon_s: float
    seam_s: float
    moves: tuple[MoveRecord, ...] = ()  # planned, in order, each with its decision

    def __post_init__(self) -> None:
        if not len(self.num_running) == len(self.context_tokens) == len(self.replicas):
            raise ConfigError("a check record needs one count and one context per replica")

    @property
    def num_planned(self) -> int:
        return len(self.moves)

    @property
    def num_made(self) -> int:
        return sum(1 for m in self.moves if m.made)

    @property
    def imbalance(self) -> int:
        """Most minus fewest running responses over the replicas."""
        return max(self.num_running, default=0) - min(self.num_running, default=0)

    def as_dict(self) -> dict[str, Any]:
        return {"t_s": round(self.t_s, 4), "num_running": list(self.num_running),
                "context_tokens": [round(c, 1) for c in self.context_tokens],
                "replicas": list(self.replicas), "horizon_s": round(self.horizon_s, 4),
                "planned": self.num_planned, "made": self.num_made,
                "moves": [m.as_dict() for m in self.moves]}


@dataclass(slots=True)
class BalanceTrace:
    """Every check of one step, in order, and the moves that took effect."""

    checks: list[CheckRecord] = field(default_factory=list)
    num_effective: int = 0  # moves that took effect (a response began a piece elsewhere)
    _open: dict[Response, MoveRecord] = field(default_factory=dict)  # made, not yet effective

    def record(self, t_s: float, loads: Sequence[ReplicaLoad], horizon_s: float,
               seam_s: float, moves: Sequence[MoveRecord] = ()) -> None:
        """One check's inputs (``loads`` as the planner got them, read before it moved
        anything) and its planned moves with their decisions."""
        self.checks.append(CheckRecord(
            t_s, tuple(ld.num_running for ld in loads),
            tuple(float(ld.context_tokens) for ld in loads),
            tuple(ld.replica for ld in loads), horizon_s, seam_s, tuple(moves)))
        for m in moves:
            if m.made and m.effective_s is None:
                self._open[m.response] = m

    def made(self, move: MoveRecord) -> None:
        """``move`` was made before its check is recorded (a live check makes its decisions
        with the event loop free between them): it may take effect before ``record``."""
        self._open[move.response] = move

    def took_effect(self, response: Hashable, t_s: float) -> None:
        """The last move made of ``response`` took effect at ``t_s`` (its next piece began on
        the destination)."""
        self.num_effective += 1
        m = self._open.pop(response, None)  # type: ignore[call-overload]
        if m is not None:
            m.effective_s = t_s

    @property
    def moves(self) -> list[MoveRecord]:
        return [m for c in self.checks for m in c.moves]

    @property
    def num_made(self) -> int:
        return sum(c.num_made for c in self.checks)

    def summary(self) -> dict[str, Any]:
        """Counts: checks, checks that moved, planned moves and each decision, effective
        moves, the mean count imbalance the checks saw, and the mean context per running
        response."""
        n = len(self.checks)
        running = sum(sum(c.num_running) for c in self.checks)
        ctx = sum(sum(c.context_tokens) for c in self.checks)
        moves = self.moves
        return {"num_checks": n, "checks_with_moves": sum(1 for c in self.checks if c.num_made),
                "planned": len(moves), "made": self.num_made,
                **{d: sum(1 for m in moves if m.decision == d) for d in DECISIONS[1:]},
                "effective": self.num_effective,
                "mean_imbalance": round(sum(c.imbalance for c in self.checks) / n, 3) if n
                else 0.0,
                "mean_context_per_response": round(ctx / running, 1) if running else 0.0}
