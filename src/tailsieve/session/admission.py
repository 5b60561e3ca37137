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
boundary, or a running turn moved mid-turn) takes its reservation along; a mid-turn move goes
only where the reservations leave room for its context (``rooms``). No future length is read.

The engine's own account of its KV (``KvReading``: vLLM's ``vllm:kv_cache_usage_perc``,
``vllm:num_preemptions_total`` and its KV size, read live by ``runtime.engine.engine_kv``) corrects
the reservations where it says more (``KvAdmission.measure``): a replica's KV budget is the
engine's where it reports one; the KV it holds is at least what the engine measures in use
(work the book cannot see: another client's requests, a model of the context that falls
short); and a replica that preempted since its previous reading takes no new session until a
reading shows none. A replica without a reading is admitted to by the reservations alone.

It is worth it only where the step is KV-bound and the re-prefills it saves clearly outweigh
the batch it costs (``kv_bound``, priced from the previous step's shape and the replicas'
cost model); elsewhere the engines hold the sessions as they come, or the lost batch costs
about what the cache hits save.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel

__all__ = ["AdmissionSettings", "KvAdmission", "KvReading", "StepShape", "kv_bound"]


@dataclass(frozen=True, slots=True)
class StepShape:
    """What the previous step showed of its sessions (lengths of a step that has ended)."""

    num_sessions: int
    mean_context_tokens: float  # mean prompt (context) of a turn
    final_context_tokens: float  # mean context of a trajectory at its end
    turn_tokens: float  # mean output of a turn


def kv_bound(shape: StepShape, configs: Sequence[ReplicaConfig], margin: float = 3.0) -> bool:
    """Whether admission by KV room pays on a step shaped like ``shape``.

    The sessions at their mean turn context ``C`` need ``rho = n C / sum K`` times the KV of
    all replicas. Where ``rho <= 1`` the engines hold them: no. Otherwise, per turn of a
    replica (``K``, its budget):

    - the gain: without admission about a share ``1 - 1 / rho`` of the turns find their
      context evicted and re-prefill it, ``P(C)`` seconds that stall the replica;
    - the loss: admission keeps about ``K / F`` sessions resident (``F``, the final
      context) instead of the ``K / C`` that fit at once, and a turn's ``O`` tokens cost
      ``c(b) / b`` replica seconds each at batch ``b``, ``c(b) = tau(b) + k b C``.

    It pays where the gain is at least ``margin`` times the loss (as ``place_turn``'s
    ``move_margin``: only where it clearly does). False where a replica has no budget or
    nothing is known yet."""
    caps = [c.kv_capacity_tokens for c in configs]
    if not configs or any(c is None for c in caps) or shape.mean_context_tokens <= 0 \
            or shape.num_sessions < 1:
        return False
    ctx = shape.mean_context_tokens
    rho = shape.num_sessions * ctx / sum(c or 0 for c in caps)
    if rho <= 1.0:
        return False
    final = max(shape.final_context_tokens, ctx)
    gains = losses = 0.0
    for cfg, cap in zip(configs, caps, strict=True):
        assert cap is not None
        gains += (1.0 - 1.0 / rho) * cfg.prefill_cost_s(int(ctx))
        model = cfg.throughput

        def per_token_s(b: float, m: ThroughputModel = model) -> float:
            b = max(b, 1.0)
            return (m.tau(b) + m.context_s_per_token * b * ctx) / b

        losses += shape.turn_tokens * max(per_token_s(cap / final) - per_token_s(cap / ctx),
                                          0.0)
    return gains >= margin * losses


@dataclass(frozen=True, slots=True)
class KvReading:
    """What a replica's engine said of its KV at one reading (its ``/metrics``)."""

    usage: float  # share of the KV cache held by requests, 0..1 (vllm:kv_cache_usage_perc)
    num_preemptions: int  # requests preempted so far, cumulative (vllm:num_preemptions_total)
    capacity_tokens: int | None = None  # the engine's KV size, tokens (None: not reported)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.usage) and 0.0 <= self.usage <= 1.0 + 1e-9):
            raise ConfigError(f"KV usage must be a share in [0, 1], got {self.usage!r}")
        if self.num_preemptions < 0:
            raise ConfigError(f"num_preemptions must be >= 0, got {self.num_preemptions}")
        if self.capacity_tokens is not None and self.capacity_tokens < 1:
            raise ConfigError(f"capacity_tokens must be >= 1, got {self.capacity_tokens}")


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
        self._capacity = list(kv_capacity_tokens)  # the book's (a reading may replace one)
        self.budget = [math.inf if c is None else share * c for c in kv_capacity_tokens]
        self.reserved = [0.0] * len(kv_capacity_tokens)
        self.num_resident = [0] * len(kv_capacity_tokens)
        self.measured = [0.0] * len(kv_capacity_tokens)  # tokens the engine says it holds
        self.pressed = [False] * len(kv_capacity_tokens)  # preempted since its last reading
        self._readings: list[KvReading | None] = [None] * len(kv_capacity_tokens)
        self._where: dict[Hashable, tuple[int, float]] = {}  # session -> (replica, reserved)

    def need(self, context_tokens: float) -> float:
        """Tokens a session of ``context_tokens`` reserves."""
        return max(float(context_tokens), self.settings.expected_context_tokens)

    def measure(self, replica: int, reading: KvReading | None) -> None:
        """``replica``'s engine reported ``reading`` (None: it cannot be read; the
        reservations alone decide there until it can). Each reading sets the replica's
        budget (the engine's KV size where it gives one, else the book's), the KV it
        measures in use and whether it preempted since the reading before."""
        if not 0 <= replica < len(self.budget):
            raise ConfigError(f"no replica {replica} (replicas 0..{len(self.budget) - 1})")
        last, self._readings[replica] = self._readings[replica], reading
        cap = self._capacity[replica]
        if reading is not None and reading.capacity_tokens is not None:
            cap = reading.capacity_tokens
        self.budget[replica] = math.inf if cap is None else self.settings.kv_share * cap
        self.measured[replica] = 0.0 if reading is None or cap is None else reading.usage * cap
        self.pressed[replica] = (reading is not None and last is not None
                                 and reading.num_preemptions > last.num_preemptions)

    def fits(self, replica: int, context_tokens: float) -> bool:
        """Whether a new session of ``context_tokens`` may become resident on ``replica``:
        never while it is preempting; an empty replica whose engine holds nothing always
        takes one; else the KV held (the reservations, or what the engine measures where
        that is more) leaves room for it."""
        if self.pressed[replica]:
            return False
        if self.num_resident[replica] == 0 and self.measured[replica] <= 0:
            return True
        held = max(self.reserved[replica], self.measured[replica])
        return held + self.need(context_tokens) <= self.budget[replica]

    def rooms(self) -> list[float]:
        """Per replica, the context tokens a running turn moved there may bring
        (``ReplicaLoad.room_tokens``): what its budget leaves beside the KV held (reservations,
        or what the engine measures where that is more); 0 while it preempts; inf without a
        budget. A move takes its session's reservation along, so a move into a replica past
        its budget would undo what admission keeps."""
        return [0.0 if self.pressed[r] else
                max(self.budget[r] - max(self.reserved[r], self.measured[r]), 0.0)
                for r in range(len(self.budget))]

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
        self.num_resident[replica] += 1

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
            self.num_resident[r] -= 1
            self.reserved[r] = max(self.reserved[r] - need, 0.0) if self.num_resident[r] else 0.0
