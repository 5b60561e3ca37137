"""Drive the pure ``ReplicaEngine`` from a real asyncio clock.

One scheduler task owns the wake-ups: it advances the engine to "now", resolves the futures
of completed sequences, then sleeps until the engine's next event (or until a submit/abort
wakes it). Nothing sleeps per token; model time is ``(loop.time() - t0) / time_scale``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

from tailsieve.model.replica_engine import Completion, ReplicaConfig, ReplicaEngine
from tailsieve.runtime.tasks import BackgroundTask


@dataclass(slots=True)
class SeqStats:
    """Cumulative per-replica counters (what ``/metrics`` exposes)."""

    prompt_tokens: int = 0  # prompt tokens prefilled (uncached) of every admitted sequence
    cached_prompt_tokens: int = 0  # prompt tokens found in the prefix cache
    finished_tokens: int = 0  # tokens of completed or aborted sequences
    num_finished: int = 0  # sequences that completed
    num_aborted: int = 0  # sequences aborted before completing


class EngineDriver:
    """A ``ReplicaEngine`` advanced in real time; sequences are awaited as futures."""

    def __init__(
        self,
        config: ReplicaConfig,
        time_scale: float = 1.0,
        on_complete: Callable[[Completion], None] | None = None,
        priority: bool = False,
    ) -> None:
        """``priority``: vLLM's priority scheduling policy (``ReplicaEngine``)."""
        self.engine = ReplicaEngine(config, priority)
        self.time_scale = time_scale  # real seconds per model second
        self.stats = SeqStats()
        self._on_complete = on_complete
        self._futures: dict[str, asyncio.Future[Completion]] = {}
        self._wake = asyncio.Event()
        self._task = BackgroundTask("emulator-engine")
        self._t0 = 0.0
        self.on_sync: Callable[[], None] | None = None  # after every advance and submission

    # ----- lifecycle ---------------------------------------------------------------
    async def start(self) -> None:
        if self._task.task is None:
            self._t0 = asyncio.get_running_loop().time()
            self._task.start(self._run)

    async def aclose(self) -> None:
        """Stop the scheduler and fail every pending sequence with ``CancelledError``."""
        await self._task.aclose()
        for fut in self._futures.values():
            if not fut.done():
                fut.cancel()
        self._futures.clear()

    # ----- time ----------------------------------------------------------------------
    def model_now_s(self) -> float:
        return (asyncio.get_running_loop().time() - self._t0) / self.time_scale

    def sync(self) -> None:
        """Advance the engine to the current time and resolve completed sequences."""
        done = self.engine.advance(max(self.engine.now_s, self.model_now_s()))
        for c in done:
            self.stats.finished_tokens += c.num_tokens
            self.stats.num_finished += 1
            fut = self._futures.pop(str(c.request_id), None)
            if fut is not None and not fut.done():
                fut.set_result(c)
            if self._on_complete is not None:
                self._on_complete(c)
        if done:
            self._wake.set()
        if self.on_sync is not None:
            self.on_sync()

    async def _run(self) -> None:
        while True:
            self.sync()
            t_next = self.engine.next_event_s()
            delay = None if math.isinf(t_next) else max(0.0, t_next - self.model_now_s())
            self._wake.clear()
            if delay is None:
                await self._wake.wait()
                continue
            with contextlib.suppress(TimeoutError):  # asyncio.timeout, not wait_for: a
                # cancel that lands as the wait ends is never swallowed (aclose would hang)
                async with asyncio.timeout(delay * self.time_scale):
                    await self._wake.wait()

    # ----- sequences -----------------------------------------------------------------
    def submit(
        self,
        seq_id: str,
        num_tokens: int,
        prompt_tokens: int,
        cached_tokens: int = 0,
        continuation: bool = False,
        priority: int = 0,
    ) -> asyncio.Future[Completion]:
        """Start a sequence now; the future resolves when its last token is emitted.
        ``cached_tokens`` leading prompt tokens are in the prefix cache (not prefilled);
        ``continuation``: the prompt carries a moved response's prefix."""
        self.sync()
        fut: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self.engine.submit(
            seq_id,
            num_tokens,
            prompt_tokens,
            cached_tokens=cached_tokens,
            continuation=continuation,
            priority=priority,
        )
        self._futures[seq_id] = fut
        self.stats.prompt_tokens += prompt_tokens - cached_tokens
        self.stats.cached_prompt_tokens += cached_tokens
        if self.on_sync is not None:
            self.on_sync()
        self._wake.set()
        return fut

    def abort(self, seq_id: str) -> int:
        """Remove an unfinished sequence now; returns the tokens it had produced."""
        self.sync()  # a sequence that completes by now is not aborted
        fut = self._futures.pop(seq_id, None)
        if fut is None:
            return 0
        fut.cancel()
        tokens = self.engine.abort(seq_id)
        self.stats.finished_tokens += tokens
        self.stats.num_aborted += 1
        self._wake.set()
        return tokens

    def tokens_so_far(self, seq_id: str) -> int:
        """Tokens the sequence has produced by now (call after ``sync``)."""
        return self.engine.tokens_so_far(seq_id)

    def running_tokens(self) -> int:
        """Tokens produced so far by every unfinished sequence."""
        return sum(self.engine.tokens_so_far(s) for s in self._futures)

    def step_real_s(self) -> float:
        """Real seconds of one decode step at the current batch size (0 when idle)."""
        return self.engine.step_s() * self.time_scale

    @property
    def num_running(self) -> int:
        return self.engine.num_running

    @property
    def num_waiting(self) -> int:
        return self.engine.num_waiting
