"""Which asyncio event loop the runtime's entry points run on: uvloop when it is installed.

uvloop (``pip install 'tailsieve[fast]'``, MIT / Apache-2.0) is a drop-in event loop written
in C over libuv. The router's hot path is one callback-driven socket per request
(``http_exchange``); at 64 replicas x 4,096 requests in flight the loop's own per-request work
(reader / writer registration, callback dispatch, futures) is a large part of the router's CPU,
and uvloop does it for less (``BENCHMARKS.md``, router overhead). It is never required: without
it, or with ``TAILSIEVE_EVENT_LOOP=asyncio``, the standard loop runs, with the same behaviour.

``TAILSIEVE_EVENT_LOOP``: ``auto`` (default: uvloop if importable), ``asyncio``, ``uvloop``
(an error when it is not installed).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tailsieve.errors import ConfigError

T = TypeVar("T")

ENV = "TAILSIEVE_EVENT_LOOP"
CHOICES = ("auto", "asyncio", "uvloop")


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the chosen loop (None: asyncio's default). ``choice`` defaults to
    ``$TAILSIEVE_EVENT_LOOP`` or ``auto``; raises ``ConfigError`` for an unknown choice, or for
    ``uvloop`` when it is not installed."""
    choice = (choice or os.environ.get(ENV) or "auto").strip().lower()
    if choice not in CHOICES:
        raise ConfigError(f"{ENV}={choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(
                "uvloop is not installed: pip install 'tailsieve[fast]' (or choose asyncio)"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """``uvloop`` or ``asyncio``: what ``loop`` (default: the running loop) is."""
    loop = loop if loop is not None else asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], choice: str | None = None) -> T:
    """``asyncio.run(main)`` on the chosen loop (see ``loop_factory``)."""
    try:
        factory = loop_factory(choice)
    except ConfigError:
        main.close()  # never started: no "was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def new_event_loop(choice: str | None = None) -> asyncio.AbstractEventLoop:
    """A new loop of the chosen kind (for a loop run on its own thread)."""
    factory = loop_factory(choice)
    return factory() if factory is not None else asyncio.new_event_loop()


__all__ = ["CHOICES", "ENV", "loop_factory", "loop_name", "new_event_loop", "run"]
