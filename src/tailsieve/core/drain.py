"""The single-turn drain: partial-rollout evidence for a step's last responses (pure, no I/O).

Late in a step few responses still run, and the step ends when the last of them does. Which
one that is, nobody knows; but a response that has run longest is, on a heavy-tailed length
distribution, the likeliest to run longest still. Two levers read only that evidence (which
responses still run and how many tokens each has generated), never a future length:

- **LPT order in the drain** (``core.drain_plan.iter_drain``): each running response's *expected remaining*
  tokens, ``E[L - a | L > a]`` for a response ``a`` tokens in, from the lengths of recent
  steps' finished responses (``RemainingModel``); each replica's expected time to finish
  its responses (``core.drain_plan._finish_times``: the all-admit closed form, context term included); moves
  that shorten the longest such time by more than they cost, greedily, so that the
  longest-expected responses end up on the least-loaded replicas.
- **Engine priority** (``engine_priority``): a piece is submitted with
  ``priority = -(tokens generated so far // bucket)`` (vLLM's priority scheduling: lower runs
  earlier), so on a replica that queues or preempts, the responses that have run longest are
  neither queued nor preempted behind fresh or short work. It needs the vLLM server flag
  ``--scheduling-policy priority`` (``tailsieve rollout --drain-priority`` checks it before
  the first step); where nothing queues and nothing is preempted it changes nothing. SGLang
  orders the other way by default (``--enable-priority-scheduling``: a higher value first,
  unless ``--schedule-low-priority-values-first``), so its pieces carry no priority.

``DrainSettings`` rides on ``core.balancer.BalanceSettings`` (the controller fills in the
length sample), so the simulator and the live runtime read the same decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from tailsieve.errors import ConfigError

__all__ = ["DrainSettings", "RemainingModel", "engine_priority"]


@dataclass(frozen=True, slots=True)
class DrainSettings:
    """Which drain levers a balanced step uses (``core.drain``)."""

    lpt: bool = True  # LPT moves once the drain begins (iter_drain instead of the balancer)
    priority: bool = False  # engine priority by tokens generated (needs the priority policy)
    start_fraction: float = 0.25  # the drain begins once at most this share of the step's
    # responses still run
    priority_bucket_tokens: int = 512  # one priority level per this many generated tokens
    lengths: tuple[int, ...] = field(default=(), repr=False)  # recent steps' finished
    # response lengths: the evidence of expected remaining work (empty: elapsed stands in)

    def __post_init__(self) -> None:
        if not 0.0 <= self.start_fraction <= 1.0:
            raise ConfigError(f"start_fraction must be in [0, 1], got {self.start_fraction}")
        if self.priority_bucket_tokens < 1:
            raise ConfigError("priority_bucket_tokens must be >= 1")
        if any(n < 0 for n in self.lengths):
            raise ConfigError("response lengths must be >= 0")

    def drains(self, num_running: int, num_launched: int) -> bool:
        """Whether the drain has begun: some response runs, and at most ``start_fraction`` of
        ``num_launched`` do (with none running there is nothing to decide)."""
        return self.lpt and 0 < num_running <= self.start_fraction * num_launched

    def remaining_model(self) -> RemainingModel:
        return RemainingModel(self.lengths)


def engine_priority(generated_tokens: int, bucket_tokens: int = 512) -> int:
    """The priority a piece is submitted with: lower runs earlier (vLLM's order), one level
    per ``bucket_tokens`` generated, so the responses that have run longest come first; a
    fresh response gets 0."""
    return -(max(0, int(generated_tokens)) // bucket_tokens)


class RemainingModel:
    """Expected remaining tokens of a response that has generated ``a`` tokens:
    ``E[L - a | L > a]`` over a sample of finished lengths (one bisection). Past every
    sampled length, or with no sample, a response is expected to run on for as long as it has
    run (``a``, at least one token)."""

    __slots__ = ("_sorted_arr", "_suffix_arr")

    def __init__(self, lengths: Sequence[int]) -> None:
        ordered = sorted(int(n) for n in lengths)
        total = sum(ordered)
        self._sorted_arr = np.asarray(ordered, dtype=float)
        self._suffix_arr = np.asarray([total - s for s in accumulate(ordered, initial=0)],
                                      dtype=float)  # sum from i

    def expected_many(self, generated_tokens: Sequence[float] | np.ndarray) -> np.ndarray:
        """The expected remaining tokens of each value, as one array (one vectorised
        bisection)."""
        a = np.asarray(generated_tokens, dtype=float)
        n = self._sorted_arr.size
        if n == 0:
            return np.maximum(a, 1.0)
        i = np.searchsorted(self._sorted_arr, a, side="right")
        above = n - i
        mean = self._suffix_arr[i] / np.maximum(above, 1)
        return np.maximum(np.where(above > 0, mean - a, a), 1.0)
