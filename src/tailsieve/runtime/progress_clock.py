"""Where a running response stands without streaming: tokens estimated from the cost model.

An unstreamed piece reports its tokens only at its end, so between seams the router knows a
response's context only up to its last seam. The cost model knows more: a replica whose decode
iteration costs ``c`` seconds advances each of its running responses by one token per ``c``
seconds. ``ProgressClock`` integrates that rate per replica over the step (piecewise: each
interval between re-balance checks at the rate of the check that opened it), so a piece that
began at ``t0`` on replica ``r`` has generated about ``tokens_at(r, now) - tokens_at(r, t0)``
tokens. No length is predicted: the estimate says how far a response has come, not how far it will go.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ProgressClock"]


@dataclass(slots=True)
class ProgressClock:
    """Per replica, the tokens one running response has generated since the step began, as
    predicted from each replica's iteration cost (seconds on the step's clock)."""

    _times: list[float] = field(default_factory=list)  # check times, increasing
    _tokens: dict[int, list[float]] = field(default_factory=dict)  # replica -> tokens at them
    _rates: dict[int, list[float]] = field(default_factory=dict)  # replica -> tokens/s after

    def run_at(self, rates: Mapping[int, float]) -> None:
        """From the last time closed (the step's start at first) on, replicas run at
        ``rates`` (tokens per second per running response, by replica); others keep theirs."""
        if not self._times:
            self._times.append(0.0)
        for r, rate in rates.items():
            rl = self._rates.get(r)
            if rl is None:  # a replica first seen now: it ran at ``rate`` from the start
                self._tokens[r] = [rate * t for t in self._times]
                self._rates[r] = [rate] * len(self._times)
            else:
                rl[-1] = rate

    def close(self, now_s: float) -> None:
        """Extend every replica's count to ``now_s`` at the rates in force."""
        if not self._times or now_s <= self._times[-1]:
            return
        dt = now_s - self._times[-1]
        self._times.append(now_s)
        for r, rl in self._rates.items():
            tl = self._tokens[r]
            tl.append(tl[-1] + dt * rl[-1])
            rl.append(rl[-1])

    @property
    def closed_s(self) -> float:
        """The last time closed: counts at or before it never change (-inf before the first
        rate). A replica first seen later is given a history then (``run_at``)."""
        return self._times[-1] if self._times else float("-inf")

    def knows(self, replica: int) -> bool:
        """Whether ``replica`` has a rate (its counts so far are then fixed up to
        ``closed_s``)."""
        return replica in self._rates

    @property
    def started(self) -> bool:
        """Whether any rate was set."""
        return bool(self._rates)

    def tokens_at(self, replica: int, t_s: float) -> float:
        """Tokens one response running on ``replica`` since the step began would have by
        ``t_s`` (0 for a replica never seen)."""
        tl = self._tokens.get(replica)
        if tl is None or t_s <= 0:
            return 0.0
        i = bisect.bisect_right(self._times, t_s) - 1
        return tl[i] + (t_s - self._times[i]) * self._rates[replica][i]
