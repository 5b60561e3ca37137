"""Hung replicas: a running piece that makes no progress for longer than its cost model says.

A stopped server (``SIGSTOP``, a wedged engine) still accepts connections and never answers, so
no connection error comes and the piece would wait for the request timeout (an hour by
default). ``StallWatch`` keeps every running piece of an execution engine (the session
gateway's, the live executor's) with where it runs and what it may generate, and checks them
every ``check_interval_s``: a piece whose last progress (its start, or the last token it
streamed) is older than ``StallSettings.limit_s`` of its expected time makes its replica a
suspect, and the replica is probed (with a timeout). One that answers is slow, not hung (a
loaded machine, a queue the cost model does not see): its pieces get a new limit. One that does
not is hung: every piece running there is stopped (a streamed one keeps what it streamed) and
the caller is told, to take the replica out and continue its responses elsewhere, exactly as
for any other replica fault (``runtime.engine.faults.ReplicaStalledError``); the health probe
re-admits it when it answers again. (A server whose health route answers while its engine is
wedged is left to the request timeout.)

The expected time of a piece is the replica's cost model (the ``auto`` profile's fit once
trusted, else its fallback): the prefill of its prompt plus its token cap at the decode step
time of the pieces running there now (``ThroughputModel.step_s``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.engine.faults import ReplicaDownError, ReplicaStalledError

if TYPE_CHECKING:
    from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest, PieceRunner

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StallSettings:
    """When a replica counts as hung."""

    factor: float = 2.0  # a piece may go without progress this many times its expected time
    floor_s: float = 30.0  # ... and never less than this many seconds
    check_interval_s: float = 1.0  # how often the running pieces are checked, s
    enabled: bool = True  # False: only the request timeout ends a hung piece

    def __post_init__(self) -> None:
        for name in ("factor", "floor_s", "check_interval_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"stall {name} must be a finite number > 0, got {v!r}")

    def limit_s(self, expected_s: float) -> float:
        """Seconds a piece expected to take ``expected_s`` may go without progress."""
        return max(self.floor_s, self.factor * expected_s)


def piece_time_s(cost: ReplicaConfig, num_running: int, context_tokens: float,
                 prompt_tokens: int, max_tokens: int) -> float:
    """Expected seconds of a piece on a replica running ``num_running`` pieces holding
    ``context_tokens``: its prompt's prefill plus ``max_tokens`` decode steps, times the waves
    the replica's ``max_num_seqs`` runs them in (a queued piece waits for those before it)."""
    n = max(num_running, 1)
    seqs = min(cost.max_num_seqs or n, n)
    step_s = cost.throughput.step_s(seqs, context_tokens)
    return cost.prefill_cost_s(prompt_tokens) + math.ceil(n / seqs) * max(max_tokens, 1) * step_s


@dataclass(slots=True)
class _Piece:
    replica: Hashable
    prompt_tokens: int
    max_tokens: int
    stop: Callable[[], object]  # ends the piece now (the caller reads it as a stall)
    progress: Callable[[], int | None] | None  # tokens it streamed so far (None: unknown)
    last_s: float  # when it last made progress (sent, or a token arrived)
    last_tokens: int | None = None
    stalled: bool = False


class StallWatch:
    """Running pieces by key; ``sweep`` finds the hung replicas (module docstring).
    ``costs(replica)``: the replica's cost model now; ``clock``: seconds, monotonic."""

    def __init__(self, settings: StallSettings, costs: Callable[[Hashable], ReplicaConfig],
                 clock: Callable[[], float]) -> None:
        self.settings = settings
        self._costs = costs
        self._clock = clock
        self._pieces: dict[Hashable, _Piece] = {}
        self.num_stalls = 0  # replicas found hung

    def start(self, key: Hashable, replica: Hashable, prompt_tokens: int, max_tokens: int,
              stop: Callable[[], object],
              progress: Callable[[], int | None] | None = None) -> None:
        """A piece was sent to ``replica``; ``stop`` ends it, ``progress`` reads its streamed
        tokens."""
        if self.settings.enabled:
            self._pieces[key] = _Piece(replica, prompt_tokens, max_tokens, stop, progress,
                                       self._clock())

    def end(self, key: Hashable) -> bool:
        """The piece ended; whether it was stopped as stalled."""
        piece = self._pieces.pop(key, None)
        return piece is not None and piece.stalled

    def suspects(self) -> list[Hashable]:
        """The replicas with a running piece that made no progress for longer than its limit
        (a streamed piece's progress is read here)."""
        now = self._clock()
        load: dict[Hashable, list[float]] = {}
        for p in self._pieces.values():
            n_ctx = load.setdefault(p.replica, [0.0, 0.0])
            n_ctx[0] += 1
            n_ctx[1] += p.prompt_tokens
        costs: dict[Hashable, ReplicaConfig] = {}
        hung: set[Hashable] = set()
        for p in self._pieces.values():
            if p.stalled or p.replica in hung:
                continue
            got = p.progress() if p.progress is not None else None
            if got is not None and got != p.last_tokens:
                p.last_tokens, p.last_s = got, now
                continue
            waited = now - p.last_s
            if waited <= self.settings.floor_s:
                continue  # never a suspect within the floor (nothing to price)
            if p.replica not in costs:
                costs[p.replica] = self._costs(p.replica)
            n, ctx = load[p.replica]
            expected = piece_time_s(costs[p.replica], int(n), ctx, p.prompt_tokens,
                                    p.max_tokens)
            if waited > self.settings.limit_s(expected):
                hung.add(p.replica)
        return list(hung)

    def stop(self, replica: Hashable) -> None:
        """``replica`` is hung: stop every piece running there."""
        self.num_stalls += 1
        for p in list(self._pieces.values()):
            if p.replica == replica and not p.stalled:
                p.stalled = True
                p.stop()

    def spare(self, replica: Hashable) -> None:
        """``replica`` answered its probe (slow, not hung): its pieces get a new limit."""
        now = self._clock()
        for p in self._pieces.values():
            if p.replica == replica:
                p.last_s = now

    async def run(self, on_stall: Callable[[Hashable, ReplicaStalledError], None],
                  answers: Callable[[Hashable], Awaitable[bool]] | None = None) -> None:
        """Check every ``check_interval_s`` until cancelled. A suspect replica is probed
        (``answers``, with its own timeout): one that answers is slow, not hung, and its
        pieces get a new limit; else its pieces stop and ``on_stall`` is told."""
        while True:
            await asyncio.sleep(self.settings.check_interval_s)
            suspects = self.suspects()
            alive = (await asyncio.gather(*(answers(r) for r in suspects))
                     if answers is not None and suspects else [False] * len(suspects))
            for r, ok in zip(suspects, alive, strict=True):
                if ok:
                    self.spare(r)
                    continue
                self.stop(r)
                exc = self.error(r)
                log.warning("%s: taken out", exc)
                on_stall(r, exc)

    def error(self, replica: Hashable) -> ReplicaStalledError:
        """The fault of a piece stopped as stalled on ``replica``."""
        st = self.settings
        return ReplicaStalledError(
            f"replica {replica} made no progress for longer than its cost model allows "
            f"({st.factor:g}x the expected piece time, at least {st.floor_s:g} s)")

    async def watched(self, key: Hashable, replica: Hashable, prompt_tokens: int,
                      max_tokens: int, call: Awaitable[T],
                      progress: Callable[[], int | None] | None = None) -> T:
        """Await ``call`` as a watched piece in this task (no task of its own); stopped as
        stalled, the task's wait is cancelled and ``ReplicaStalledError`` raised. A cancel
        from elsewhere stays a cancel."""
        task = asyncio.current_task()
        assert task is not None
        self.start(key, replica, prompt_tokens, max_tokens, task.cancel, progress)
        try:
            return await call
        except asyncio.CancelledError:
            if self.stopped(key, task):
                raise self.error(replica) from None
            raise
        finally:
            self.end(key)

    def stopped(self, key: Hashable, task: asyncio.Task[object]) -> bool:
        """A cancel of ``task`` that reached the watched piece ``key`` was the watch's own stop
        (and no other cancel is pending): the caller reads it as a stall. Ends the piece."""
        return self.end(key) and task.uncancel() == 0

    async def piece(self, runner: PieceRunner, replica: int, piece: PieceRequest,
                    where: Hashable | None = None,
                    ) -> tuple[PieceOutput | None, ReplicaDownError | None]:
        """Run ``piece`` on ``replica`` through ``runner`` in this task, watched (``where``:
        the replica as this watch names it; default ``replica``): its output (a streamed
        piece's partial one when it was cut or stopped, else None on a fault) and the replica
        fault that ended it (``runtime.engine.faults``); any other error is raised. Stopped, a piece
        the runner streams is cut where it stands (``HttpPieceRunner.cut``: a hung replica
        sends nothing more; its tokens are kept), another one's wait cancelled."""
        key = piece.request_id
        name = replica if where is None else where
        task = asyncio.current_task()
        assert task is not None
        streamed = getattr(runner, "generated_tokens", None)
        cut = getattr(runner, "cut", None)

        def stop() -> None:
            if cut is not None and streamed is not None and streamed(key) is not None:
                cut(key)
            else:
                task.cancel()

        self.start(key, name, len(piece.prompt_ids), piece.max_tokens, stop,
                   (lambda: streamed(key)) if streamed is not None else None)
        try:
            out = await runner.run_piece(replica, piece)
        except asyncio.CancelledError:
            if self.stopped(key, task):
                return None, self.error(name)
            raise
        except ReplicaDownError as exc:
            self.end(key)
            return exc.partial, exc
        except BaseException:
            self.end(key)
            raise
        return out, self.error(name) if self.end(key) else None
