"""Per-replica timeline of one step, derived from its plan and outcome (for plots/reports)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan


@dataclass(frozen=True, slots=True)
class TimelineBar:
    """One group's attempt on its replica (a spread group: on every replica it ran on)."""

    prompt_id: str
    replica: int
    pool: str  # "tail" | "bulk"
    pinned: bool  # carried candidate (never aborted)
    end_s: float  # completion time, or the cutoff for an aborted attempt
    aborted: bool  # cut off at the cutoff; its prompt became a candidate
    tokens: int  # tokens of the delivered attempt, or wasted tokens when aborted
    replicas: tuple[int, ...] = ()  # spread group: the replicas of its responses; () = replica

    @property
    def on_replicas(self) -> tuple[int, ...]:
        """Every replica the attempt ran on (a spread group's bar ends with its whole group)."""
        return tuple(sorted(set(self.replicas))) if self.replicas else (self.replica,)


@dataclass(frozen=True, slots=True)
class StepTimeline:
    """Everything needed to draw one step replica by replica."""

    step: int
    num_replicas: int
    q: int
    m: int
    cutoff_s: float  # moment the fresh bulk groups were cut off (0 when nothing was cut)
    tail_time_s: float
    bulk_cut_s: float
    makespan_s: float
    bars: tuple[TimelineBar, ...]

    @classmethod
    def from_step(cls, plan: StepPlan, outcome: StepOutcome) -> StepTimeline:
        assign = {a.prompt_id: a for a in plan.assignments}
        fresh_done = [
            g.completion_s for g in outcome.delivered if plan.is_abortable(assign[g.prompt_id])
        ]
        cutoff = max(fresh_done) if outcome.aborted and fresh_done else 0.0
        bars = [
            TimelineBar(
                g.prompt_id,
                g.replica,
                g.pool.value,
                assign[g.prompt_id].pinned,
                g.completion_s,
                False,
                g.total_tokens,
                _placed(assign[g.prompt_id].replicas, g.replica),
            )
            for g in outcome.delivered
        ]
        bars += [
            TimelineBar(
                a.prompt_id,
                a.replica,
                assign[a.prompt_id].pool.value,
                False,
                cutoff,
                True,
                a.wasted_tokens,
                _placed(assign[a.prompt_id].replicas, a.replica),
            )
            for a in outcome.aborted
        ]
        return cls(
            plan.step,
            plan.num_replicas,
            plan.q,
            plan.m,
            cutoff,
            outcome.tail_time_s,
            outcome.bulk_cut_s,
            outcome.makespan_s,
            tuple(bars),
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bars"] = [asdict(b) for b in self.bars]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepTimeline:
        bars = tuple(
            TimelineBar(**{**b, "replicas": tuple(b.get("replicas", ()))}) for b in d["bars"]
        )
        return cls(**{**d, "bars": bars})


def _placed(planned: tuple[int, ...], replica: int) -> tuple[int, ...]:
    """A spread group's planned replicas, unless a fault moved it (then its delivering one)."""
    return planned if planned and replica in planned else ()
