"""One client request's samples running at the gateway: their traces, live tokens and outputs.

``service.ProxyService.start`` makes a ``RequestRun`` and starts one task per sample; each
sample's new tokens and its end are announced on ``events`` (``generation`` streams from them).
``wait`` gives every output in order or raises the request's ``ApiError`` (one failed sample
fails the request: ``fail`` cancels the others); ``abort`` ends the running samples with what
they generated so far, ``cancel`` drops the request.
"""

from __future__ import annotations

import asyncio
import time

from tailsieve.runtime.proxy.api_error import ApiError
from tailsieve.runtime.proxy.request import ProxyRequest
from tailsieve.runtime.proxy.sample import LiveTokens, SampleOutput, SampleTrace


class RequestRun:
    """One request's samples at the gateway (``ProxyService.start`` makes it). A prompt sent
    as text (``texts``) has no ids (``prompt_ids`` empty) until its server echoes them."""

    def __init__(self, req: ProxyRequest, prompt_ids: list[tuple[int, ...]],
                 texts: list[str | None] | None = None) -> None:
        self.req = req
        self.prompt_ids = prompt_ids
        self.texts = texts or [None] * len(prompt_ids)
        self.traces = [SampleTrace(prompt_ids[i // req.n]) for i in range(req.num_samples)]
        self.lives = [LiveTokens() for _ in range(req.num_samples)]
        self.outputs: list[SampleOutput | None] = [None] * req.num_samples
        self.events: asyncio.Queue[tuple[str, int]] = asyncio.Queue()  # ("tokens" | "done", i)
        self.error: ApiError | None = None
        self.aborted = False
        self.tasks: list[asyncio.Task[None]] = []
        self.t0 = time.monotonic()

    @property
    def done(self) -> bool:
        return self.error is not None or all(o is not None for o in self.outputs)

    async def wait(self) -> list[SampleOutput]:
        """Every sample's output, in order; raises the request's ``ApiError``."""
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.error is not None:
            raise self.error
        return [o for o in self.outputs if o is not None]

    def abort(self) -> None:
        """End the running samples with what they generated so far."""
        self.aborted = True
        for t in self.tasks:
            t.cancel()

    def cancel(self) -> None:
        """Drop the request (the client went away): its samples stop, nothing is delivered."""
        for t in self.tasks:
            t.cancel()

    def fail(self, err: ApiError) -> None:
        if self.error is None:
            self.error = err
            self.cancel()
        self.events.put_nowait(("error", -1))
