"""Admission of sessions by KV room: keep a KV-bound replica out of recompute (pure).

Where the sessions of a step hold far more context than the replicas' KV budget (SWE agents
at 64 sessions a replica: about 2M tokens against 445K), every turn that ends frees its
blocks, the turns queued behind it take them, and by the time its tool returns the session's
context is gone: every turn re-prefills its whole context (a 30K-token context costs 0.76 s on
Qwen3-4B / H100, as much replica time as decoding the turn) and vLLM preempts and recomputes
running turns. Admitting more sessions than the KV holds buys no decode throughput there: a
decode step's cost is dominated by the context it reads, so the tokens a replica emits per
second hardly depend on how many sessions share it.

``KvAdmission`` makes a session *resident* on a replica when its first turn is sent there: it
then reserves ``max(context, expected context)`` tokens of that replica's KV until it ends,
through its tool calls, so its context stays cached between turns. A new session is sent only
to a replica whose reservations leave it room (``AdmissionSettings.kv_share`` of the budget);
where none has room it waits at the router, and is admitted when a resident session ends. The
expected context is what the previous steps' trajectories grew to at their end (a step's
trajectories are drawn alike); before any step has ended it is the session's own context, so
the first step admits by what it sees. A session that moves (a priced move at a turn
boundary) takes its reservation along. No future length is read.

It is worth it only where the step is KV-bound (``kv_bound``: the sessions at their mean
turn context need more than the replicas' KV together); elsewhere the engines hold the
sessions as they come and admission would only cut the batch.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from tailsieve.errors import ConfigError

__all__ = ["AdmissionSettings", "KvAdmission", "kv_bound"]


def kv_bound(mean_context_tokens: float, num_sessions: int,
             kv_capacity_tokens: Sequence[int | None]) -> bool:
    """Whether a step is KV-bound, so that admission pays: its sessions, each holding the
    mean context of a turn (``mean_context_tokens``, the previous step's), would need more
    KV than every replica's budget together. Below that, the sessions' peaks do not coincide
    and the engines hold them (measured: no preemptions), while admission would only cut
    the batch. False where a replica has no budget."""
    if any(c is None for c in kv_capacity_tokens) or mean_context_tokens <= 0:
        return False
    return num_sessions * mean_context_tokens > sum(c or 0 for c in kv_capacity_tokens)


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """The knobs of ``KvAdmission``."""

    kv_share: float = 1.0  # share of a replica's KV budget its resident sessions may reserve
    expected_context_tokens: float = 0.0  # what a session's context is expected to grow to
    # (the previous steps' mean final context; 0: unknown, each session its own context)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.kv_share) and self.kv_share > 0):
            raise ConfigError(f"kv_share must be a finite number > 0, got {self.kv_share!r}")
        if not (math.isfinite(self.expected_context_tokens)
                and self.expected_context_tokens >= 0):
            raise ConfigError("expected_context_tokens must be a finite number >= 0, got "
                              f"{self.expected_context_tokens!r}")


class KvAdmission:
    """Every replica's resident sessions and the KV they reserve (see the module docstring)."""

    def __init__(self, kv_capacity_tokens: Sequence[int | None],
                 settings: AdmissionSettings | None = None) -> None:
        if not kv_capacity_tokens:
            raise ConfigError("admission needs at least one replica")
        self.settings = settings or AdmissionSettings()
        share = self.settings.kv_share
        self.budget = [math.inf if c is None else share * c for c in kv_capacity_tokens]
        self.reserved = [0.0] * len(kv_capacity_tokens)
        self._where: dict[Hashable, tuple[int, float]] = {}  # session -> (replica, reserved)

    def need(self, context_tokens: float) -> float:
        """Tokens a session of ``context_tokens`` reserves."""
        return max(float(context_tokens), self.settings.expected_context_tokens)

    def fits(self, replica: int, context_tokens: float) -> bool:
        """Whether a new session of ``context_tokens`` may become resident on ``replica``
        (an empty replica always takes one)."""
        return (self.reserved[replica] == 0.0
                or self.reserved[replica] + self.need(context_tokens) <= self.budget[replica])

    def with_room(self, context_tokens: float) -> list[int]:
        """The replicas where a new session of ``context_tokens`` fits."""
        return [r for r in range(len(self.budget)) if self.fits(r, context_tokens)]

    def resident(self, session: Hashable) -> int | None:
        """The replica ``session`` is resident on (None: not admitted)."""
        got = self._where.get(session)
        return None if got is None else got[0]

    def admit(self, session: Hashable, replica: int, context_tokens: float) -> None:
        """``session`` becomes resident on ``replica`` (or moves there with its reservation;
        the caller checked ``fits``)."""
        if not 0 <= replica < len(self.budget):
            raise ConfigError(f"no replica {replica} (replicas 0..{len(self.budget) - 1})")
        self.release(session)
        need = self.need(context_tokens)
        self._where[session] = (replica, need)
        self.reserved[replica] += need

    def grow(self, session: Hashable, context_tokens: float) -> None:
        """A resident session's context is now ``context_tokens``."""
        got = self._where.get(session)
        if got is None:
            return
        r, old = got
        need = max(old, self.need(context_tokens))
        self._where[session] = (r, need)
        self.reserved[r] += need - old

    def release(self, session: Hashable) -> None:
        """``session`` ended (or left): its reservation is freed (unknown ones: nothing)."""
        got = self._where.pop(session, None)
        if got is not None:
            r, need = got
            self.reserved[r] = max(self.reserved[r] - need, 0.0)
