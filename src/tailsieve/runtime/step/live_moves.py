"""What a live step's executor and its rebalancer (``runtime.step.rebalancer``) exchange: the
running responses the executor reports (``LiveResponse``; ``index_of`` makes them a
``RunningIndex``), the executor's side of a move (``Mover``) and the rebalancer's tally of the
step's moves (``MoveTally``, for the step's metrics)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from tailsieve.core.running_index import RunningIndex

__all__ = ["LiveResponse", "MoveTally", "Mover", "index_of"]


class LiveResponse(NamedTuple):
    """One running response as the executor knows it (a named tuple: a check reads one per
    running response, thousands at cluster scale)."""

    prompt_id: str
    sample: int
    replica: int  # plan replica its current piece runs on (or its next piece will)
    context_tokens: int  # prompt + generated tokens known so far
    prompt_tokens: int  # of them, the prompt's (0 when not known yet)
    dealt: tuple[int, ...]  # plan replicas the group was dealt (its prompt is cached there)
    pool: int  # 1 = tail pool, 0 = bulk pool
    piece: tuple[int, float, int] | None = None  # unstreamed running piece: (replica it runs
    # on, seconds it has run, most tokens it may add); its tokens are not in context_tokens


class Mover(Protocol):
    """What the rebalancer needs from the executor (``LiveExecutor`` is one). An executor that
    also has ``running_index() -> RunningIndex | None`` is read through it (O(replicas) per
    check) instead of ``running_responses`` (O(running responses)); one whose
    ``defers_moves`` is true makes a move of a running piece at the piece's end (recorded as
    deferred)."""

    def running_responses(self) -> list[LiveResponse]: ...

    def move(self, prompt_id: str, sample: int, to_replica: int) -> bool: ...


@dataclass(slots=True)
class MoveTally:
    """What the rebalancer did in one step (``StepMetrics`` reads it)."""

    num_checks: int = 0
    num_moves: int = 0  # moves asked for and accepted by the executor
    num_effective: int = 0  # moves that took effect: a response's next piece began elsewhere
    moved_tokens: int = 0  # prefix tokens carried by moved responses (prompt + generated)
    prefill_tokens: int = 0  # of them, predicted uncached on the destination
    prefill_s: float = 0.0  # predicted prefill of those tokens (the cost model's), seconds
    # how long each slice of a check held the router's event loop (CPU seconds; the loop runs
    # between slices): reading the loads, then each decision (planning at most
    # ``max_moves_per_decision`` moves and making them), and each whole check (its slices)
    loads_cpu_s: list[float] = field(default_factory=list)
    decision_cpu_s: list[float] = field(default_factory=list)
    check_cpu_s: list[float] = field(default_factory=list)


def index_of(responses: Sequence[LiveResponse], now_s: float) -> RunningIndex:
    """A ``RunningIndex`` of responses read at ``now_s`` (a piece's age gives its start)."""
    idx = RunningIndex(frozenset(x.replica for x in responses if x.pool))
    for x in responses:
        key = (x.prompt_id, x.sample)
        idx.add(key, x.replica, x.context_tokens, x.prompt_tokens, x.dealt)
        if x.piece is not None:
            on, age_s, cap = x.piece
            idx.piece_started(key, None, on, now_s - age_s, cap)
    return idx
