"""Background tasks (a poller, a rebalancer, an expiry sweep): started once, stopped by a
cancel that is waited for. A task that had already ended with an error other than the cancel
raises it from the wait, so a crashed loop is not lost at close."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` (None: none), then wait for all of them to end; the first error other
    than the cancel is raised once all have ended. A cancel of the caller itself still
    propagates."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    results = await asyncio.gather(*live, return_exceptions=True)
    errors = [r for r in results
              if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)]
    if errors:
        raise errors[0]


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
