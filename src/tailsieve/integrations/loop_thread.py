"""A private event loop on a daemon thread, for frameworks that call TailSieve synchronously.

``TailSieveRollout`` keeps HTTP sessions that belong to one event loop, but verl's
``auto_await`` and slime's rollout functions start a fresh loop (or none) per call. The
adapters therefore run every TailSieve coroutine on one loop that lives as long as they do.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from tailsieve.runtime.event_loop import new_event_loop

T = TypeVar("T")


class LoopThread:
    """Runs coroutines on a dedicated event loop thread (started on creation)."""

    def __init__(self, name: str = "tailsieve-loop") -> None:
        self._loop = new_event_loop()  # uvloop when installed (tailsieve[fast])
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and block until it returns (re-raises its exception)."""
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("LoopThread is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` running on the loop from another event loop."""
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return await asyncio.wrap_future(fut)

    def close(self) -> None:
        """Stop the loop and join the thread (idempotent)."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10.0)
        self._loop.close()
