"""Tokens of discarded attempts: counted exactly where observed, estimated where not.

A group attempt is discarded at the cutoff (a fresh bulk group aborted). All tokens it
generated are wasted:

- finished responses: exact (each response's ``num_tokens``);
- unfinished streamed responses (``stream=True``): exact, the tokens received so far;
- unfinished non-streamed responses: the server says nothing until a response finishes, and a
  dead server never will. Each is estimated as its elapsed request seconds times the observed
  per-request decode rate: the tokens per request-second of every request this executor has
  seen complete (from sending it to its last token, so time spent queued lowers the rate: when
  requests queue, the estimate is low), capped at what its running piece may generate (the
  response's ``max_tokens`` or its forced length in replay mode, without continuation). Before
  any request has completed, nothing is estimated (0). A request that hung without generating
  is still estimated at the rate: stream for exact counts.

A fault never discards a group: only its running pieces are lost (``AttemptProgress.lost``):
with continuation a response continues elsewhere from its last seam; without, the response
(or a group sent as one request with ``n``, all of it) starts again elsewhere, and its one
piece is lost. A lost piece's tokens are decoded again: exact when they were streamed and could
not be kept, otherwise estimated as above, capped at the piece's cap. A cut chained response
wastes what it generated up to its last seam (exact), what its running piece streamed (exact)
or, unstreamed, the running piece's estimate.

Every estimate has its bound: it lies between 0 and the cap of what it estimates
(``AttemptWaste.max_estimated``). A step's waste is split three ways (``core.outcome.WasteSplit``,
built by ``split_waste``): the tokens of cutoff aborts, the tokens decoded again after a fault or
a move counted exactly (seen: streamed, or finished), and those estimated (unseen), each with its
bound. The estimated part is also reported on its own (``StepOutcome.estimated_wasted_tokens``,
``AbortedGroup.estimated_tokens``) and included in ``wasted_tokens``. Tokens of a request that
failed with an HTTP error and was retried are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from tailsieve.core.outcome import WasteSplit
from tailsieve.errors import ConfigError


class LostPiece(NamedTuple):
    """A piece that ended before its end without its tokens being kept (its replica failed,
    or a move had to drop it; without continuation, a response restarted elsewhere): what it
    had generated is decoded again."""

    sample: int
    started_s: float  # loop time it was sent
    ended_s: float  # loop time it was lost
    cap: int  # the most tokens it could have generated
    exact: int = 0  # tokens it is known to have generated and that were dropped (streamed)
    estimate: bool = True  # its unseen tokens are estimated (False: streamed, or none made)


@dataclass(slots=True)
class AttemptProgress:
    """Live evidence of one group's attempt (``runtime.step.chain_attempt``), read at the cutoff
    and at the step's end."""

    num_finished: int = 0  # responses finished
    finished_tokens: int = 0  # tokens of the finished responses
    live_tokens: dict[int, int] = field(default_factory=dict)  # sample -> tokens observed of
    # an unfinished response (streaming; with continuation, up to its last seam plus streamed)
    started_s: dict[int, float] = field(default_factory=dict)  # unfinished: sample -> sent at
    # (with continuation: when its running piece was sent)
    caps: dict[int, int] = field(default_factory=dict)  # unstreamed unfinished sample ->
    # the most tokens its running piece may add
    timed_tokens: int = 0  # tokens of completed requests (responses, or continuation pieces)
    timed_s: float = 0.0  # their request seconds (sent to last token): the decode rate's sample
    streaming: bool = False  # unfinished responses' tokens are observed (live_tokens)
    lost: list[LostPiece] = field(default_factory=list)  # pieces lost mid-way

    @property
    def tokens_so_far(self) -> int:
        """Tokens of unfinished responses (streaming only; -1 when not observed)."""
        return sum(self.live_tokens.values()) if self.live_tokens else -1


@dataclass(frozen=True, slots=True)
class AttemptWaste:
    """Wasted tokens of one discarded attempt (or of the pieces it lost)."""

    exact: int  # finished responses + streamed tokens of unfinished ones
    estimated: int  # unfinished non-streamed responses (rate x elapsed, capped)
    max_estimated: int = 0  # the most ``estimated`` can be: the caps of what it estimates
    num_pieces: int = 0  # lost pieces counted (``lost_waste``)

    def __post_init__(self) -> None:
        if min(self.exact, self.estimated, self.num_pieces) < 0:
            raise ConfigError(f"AttemptWaste counts must be >= 0: {self}")
        if self.estimated > self.max_estimated:
            raise ConfigError(f"AttemptWaste: estimated {self.estimated} > its bound "
                              f"{self.max_estimated}")

    @property
    def total(self) -> int:
        return self.exact + self.estimated

    def __add__(self, other: AttemptWaste) -> AttemptWaste:
        return AttemptWaste(self.exact + other.exact, self.estimated + other.estimated,
                            self.max_estimated + other.max_estimated,
                            self.num_pieces + other.num_pieces)


@dataclass(slots=True)
class WasteCounter:
    """Learns the per-request decode rate from completed requests; counts discarded attempts.
    One per executor (the rate carries over steps)."""

    rate_tokens: int = 0  # tokens of the finished responses learned from
    rate_s: float = 0.0  # their request seconds

    @property
    def tokens_per_s(self) -> float | None:
        """Observed tokens per request-second; None before any response finished."""
        if self.rate_tokens <= 0 or self.rate_s <= 0:
            return None
        return self.rate_tokens / self.rate_s

    def learn(self, attempts: Iterable[AttemptProgress]) -> None:
        """Add the completed requests of ``attempts`` (each attempt once) to the rate."""
        for p in attempts:
            self.rate_tokens += p.timed_tokens
            self.rate_s += p.timed_s

    def count(self, p: AttemptProgress, end_s: float) -> AttemptWaste:
        """Wasted tokens of an attempt discarded at ``end_s`` (the event loop's clock): each
        unstreamed running piece estimated within its cap (``AttemptProgress.caps``)."""
        exact = p.finished_tokens + max(p.tokens_so_far, 0)
        if p.streaming:
            return AttemptWaste(exact, 0)
        est = bound = 0
        for sample, start_s in p.started_s.items():
            cap = p.caps[sample]
            est += self._estimate(end_s - start_s, cap)
            bound += cap
        return AttemptWaste(exact, est, bound)

    def count_lost(self, p: AttemptProgress) -> AttemptWaste:
        """Wasted tokens of the pieces ``p`` lost (``AttemptProgress.lost``)."""
        return lost_waste(p.lost, self.tokens_per_s)

    def _estimate(self, elapsed_s: float, cap: int) -> int:
        rate = self.tokens_per_s or 0.0
        return round(min(max(0.0, elapsed_s) * rate, float(cap)))


def lost_waste(lost: Iterable[LostPiece], tokens_per_s: float | None) -> AttemptWaste:
    """Exact and estimated tokens of lost pieces at ``tokens_per_s`` (nothing estimated while
    the rate is unknown): each piece's dropped streamed tokens exactly, and, where its tokens
    were not seen, its elapsed seconds times the rate, at most its cap less what was seen
    (the bound, ``max_estimated``)."""
    exact = est = bound = num = 0
    for piece in lost:
        num += 1
        exact += piece.exact
        if not piece.estimate:
            continue
        room = max(piece.cap - piece.exact, 0)
        bound += room
        if tokens_per_s is not None:
            elapsed = max(0.0, piece.ended_s - piece.started_s)
            est += round(min(elapsed * tokens_per_s, float(room)))
    return AttemptWaste(exact, est, bound, num)


def split_waste(cutoff: Iterable[AttemptWaste], lost: Iterable[AttemptWaste]) -> WasteSplit:
    """A step's ``WasteSplit`` from the waste of its attempts aborted at the cutoff and of
    the pieces lost to faults or moves."""
    cut = sum(cutoff, AttemptWaste(0, 0))
    gone = sum(lost, AttemptWaste(0, 0))
    return WasteSplit(
        cutoff_tokens=cut.total,
        cutoff_estimated_tokens=cut.estimated,
        cutoff_max_tokens=cut.exact + cut.max_estimated,
        lost_exact_tokens=gone.exact,
        lost_estimated_tokens=gone.estimated,
        lost_estimated_max_tokens=gone.max_estimated,
        num_lost_pieces=gone.num_pieces,
    )
