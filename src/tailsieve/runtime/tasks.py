"""Background tasks (a poller, a rebalancer, an expiry sweep): started once, stopped by a
cancel that is waited for. A task that had already ended with an error other than the cancel
raises it from the wait, so a crashed loop is not lost at close."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

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
