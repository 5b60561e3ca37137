"""Background tasks (a poller, a rebalancer, an expiry sweep): started once, stopped by a
cancel that is waited for. A task that had already ended with an error other than the cancel
raises it from the wait, so a crashed loop is not lost at close."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` (None: none), then wait for each to end."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    for t in live:
        with contextlib.suppress(asyncio.CancelledError):
            await t


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
        await cancel_and_wait(self.task)
        self.task = None
