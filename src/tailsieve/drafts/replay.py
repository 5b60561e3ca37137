"""Exact-match replay of one recorded response, verify step by verify step.

vLLM's rejection sampler treats an n-gram or suffix draft as one-hot: a drafted token is
accepted exactly when the target model samples that same token at that position. So replaying a
recorded (sampled) response against a draft, accepting the longest exact-match prefix and
emitting it plus one token the model samples itself (the bonus token), is an unbiased estimate of
what the engine would accept.

Accounting per verify step at position ``t`` (tokens already generated) of a response of ``n``
tokens: ``accepted`` = length of the common prefix of the draft and ``response[t:]``, at most
``n - t``; ``emitted = min(accepted + 1, n - t)`` (no bonus token after the response's last
token). Position 0 comes from the prefill step, which drafts nothing, so verify steps start at
``t = 1``. ``tau`` = emitted tokens / verify steps (>= 1; at most ``max_spec_tokens + 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

POSITION_BUCKETS: tuple[tuple[int, int | None], ...] = ((0, 64), (64, 256), (256, 512),
                                                        (512, None))


def bucket_label(lo: int, hi: int | None) -> str:
    """``"0-63"``, ..., ``"512+"``."""
    return f"{lo}+" if hi is None else f"{lo}-{hi - 1}"


def accepted_prefix(draft: Sequence[int], response: Sequence[int], position: int) -> int:
    """Length of the common prefix of ``draft`` and ``response[position:]``."""
    m = 0
    limit = min(len(draft), len(response) - position)
    while m < limit and draft[m] == response[position + m]:
        m += 1
    return m


@dataclass(slots=True)
class BucketStats:
    """Counts of one position bucket (or of a whole run)."""

    steps: int = 0
    emitted: int = 0
    drafted: int = 0
    accepted: int = 0
    steps_with_draft: int = 0

    def add(self, other: BucketStats) -> None:
        """Accumulate ``other`` into this."""
        self.steps += other.steps
        self.emitted += other.emitted
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.steps_with_draft += other.steps_with_draft

    @property
    def tau(self) -> float:
        """Mean tokens per verify step, bonus token included (1.0 when there was no step)."""
        return self.emitted / self.steps if self.steps else 1.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0.0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def draft_rate(self) -> float:
        """Share of verify steps that carried a non-empty draft."""
        return self.steps_with_draft / self.steps if self.steps else 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {"steps": self.steps, "emitted_tokens": self.emitted,
                "drafted_tokens": self.drafted, "accepted_tokens": self.accepted,
                "steps_with_draft": self.steps_with_draft, "tau": self.tau,
                "acceptance_rate": self.acceptance_rate, "draft_rate": self.draft_rate}


@dataclass(slots=True)
class ReplayStats:
    """Verify-step counts by position bucket; ``total()`` sums them."""

    buckets: list[BucketStats] = field(
        default_factory=lambda: [BucketStats() for _ in POSITION_BUCKETS])
    responses: int = 0

    def record(self, position: int, drafted: int, accepted: int, emitted: int) -> None:
        """One verify step at ``position`` (tokens generated before it)."""
        b = self.buckets[_bucket_of(position)]
        b.steps += 1
        b.emitted += emitted
        b.drafted += drafted
        b.accepted += accepted
        if drafted:
            b.steps_with_draft += 1

    def add(self, other: ReplayStats) -> None:
        for mine, theirs in zip(self.buckets, other.buckets, strict=True):
            mine.add(theirs)
        self.responses += other.responses

    def total(self) -> BucketStats:
        out = BucketStats()
        for b in self.buckets:
            out.add(b)
        return out

    def to_dict(self) -> dict[str, object]:
        return {"responses": self.responses, **self.total().to_dict(),
                "by_position": {bucket_label(lo, hi): b.to_dict()
                                for (lo, hi), b in zip(POSITION_BUCKETS, self.buckets,
                                                       strict=True)}}


def _bucket_of(position: int) -> int:
    for i, (_lo, hi) in enumerate(POSITION_BUCKETS):
        if hi is None or position < hi:
            return i
    return len(POSITION_BUCKETS) - 1


def verify(stats: ReplayStats, draft: Sequence[int], response: Sequence[int],
           position: int) -> int:
    """Score one verify step of ``response`` at ``position`` with ``draft``; record it and
    return the number of tokens it emits."""
    acc = accepted_prefix(draft, response, position)
    emitted = min(acc + 1, len(response) - position)
    stats.record(position, len(draft), acc, emitted)
    return emitted
