"""Background tasks (a poller, a rebalancer, an expiry sweep): started once, stopped by a
cancel that is waited for. A task that had already ended with an error other than the cancel
raises it from the wait, so a crashed loop is not lost at close."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from tailsieve.runtime.engine.faults import ReplicaDownError

T = TypeVar("T")


async def gather_all(*aws: Awaitable[T]) -> list[T]:
    """Await every one of ``aws`` to its end, then raise the first error other than a cancel
    (one failing does not leave the others running); else their results, in order. A cancel
    of the caller itself still propagates."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    errors = [r for r in results
              if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)]
    if errors:
        raise errors[0]
    return [r for r in results if not isinstance(r, BaseException)]


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` (None: none), then wait for all of them to end (``gather_all``)."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    await gather_all(*live)


class BackgroundTask:
    """One coroutine run in the running event loop from ``start`` until ``aclose``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.task: asyncio.Task[None] | None = None

    def start(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``run()`` in the background, unless it runs already."""
        if self.task is None:
            self.task = asyncio.create_task(run(), name=self.name)

    async def aclose(self) -> None:
        """Cancel it and wait for its end (if it runs); ``start`` may run it again."""
        try:
            await cancel_and_wait(self.task)
        finally:
            self.task = None


async def all_or_first_error(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Await all; on the first error cancel the rest and raise it (a ``ReplicaDownError`` wins
    over other errors so a dead replica is never reported as a request failure). Cancelled
    itself, it cancels them all and reads their errors."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = [len(tasks)]

    def on_done(t: asyncio.Future[T]) -> None:
        left[0] -= 1
        if not waiter.done() and (left[0] == 0 or t.cancelled() or t.exception() is not None):
            waiter.set_result(None)

    try:
        for t in tasks:
            t.add_done_callback(on_done)
        if tasks:
            await waiter
        errors = [t.exception() for t in tasks if t.done() and t.exception() is not None]
        if errors:
            down = [e for e in errors if isinstance(e, ReplicaDownError)]
            raise (down or errors)[0]  # type: ignore[misc]
        return [t.result() for t in tasks]
    finally:
        running = [t for t in tasks if not t.done()]
        for t in running:
            t.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        for t in tasks:  # read, also when this call was cancelled first: not "never retrieved"
            if t.done() and not t.cancelled():
                t.exception()
