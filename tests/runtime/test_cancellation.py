"""Cancellation propagates through the router's waits: a cancelled caller is never swallowed
(no ``suppress(BaseException)`` anywhere in ``src/``)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import tailsieve
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.execution.chain import ResponseChain
from tailsieve.runtime.step.chain_attempt import ChainedAttempt
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.waste import AttemptProgress

SRC = Path(tailsieve.__file__).parent


class HeldGeneration:
    """SGLang-shaped replicas whose ``/generate`` never answers (until cancelled) and whose
    ``/abort_request`` answers at once without ending it."""

    def __init__(self) -> None:
        self.generating = asyncio.Event()
        self.aborted = asyncio.Event()
        self.cancelled: list[str] = []

    async def post_json(self, url: str, payload: Any, timeout_s: float | None) -> Any:
        if url.endswith("/abort_request"):
            self.aborted.set()
            return {}
        self.generating.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(url)
            raise

    def stream_json(self, url: str, payload: Any, timeout_s: float | None
                    ) -> AsyncIterator[Any]:
        raise AssertionError("not streamed")

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        return 200, ""

    async def aclose(self) -> None:
        return None


def attempt(transport: HeldGeneration) -> ChainedAttempt:
    cfg = ExecutorConfig(backend=Backend.SGLANG, model="m", continuation=True,
                         sampling=SamplingParams(max_tokens=64))
    prompt = PromptInput("p", token_ids=(1, 2, 3))
    chains = [ResponseChain(64, prompt.token_ids)]
    runner = HttpPieceRunner(["http://r0", "http://r1"], Backend.SGLANG, "m",
                             transport=transport)
    return ChainedAttempt(runner, [0], cfg, prompt, chains, None, AttemptProgress(),
                          lambda *a: 0)


async def test_a_cancel_during_a_moves_abort_is_not_swallowed() -> None:
    """A move on SGLang aborts the running piece by id (``/abort_request``, answered here
    without ending it); the attempt, cancelled while its piece still waits, ends cancelled
    (and cancels the piece), rather than swallowing the cancel and running on."""
    t = HeldGeneration()
    att = attempt(t)
    runner = asyncio.ensure_future(att.run())
    await t.generating.wait()
    assert att.move(0, 1)
    await t.aborted.wait()  # the abort was sent and answered at once
    for _ in range(10):  # let the attempt go back to waiting for the piece's output
        await asyncio.sleep(0)
    assert not runner.done()
    runner.cancel()
    await asyncio.wait({runner})
    assert runner.cancelled(), "the cancel was swallowed"
    assert t.cancelled == ["http://r0/generate"]  # the held piece was cancelled on the way out


async def test_cancelling_a_running_attempt_cancels_it() -> None:
    t = HeldGeneration()
    att = attempt(t)
    runner = asyncio.ensure_future(att.run())
    await t.generating.wait()
    runner.cancel()
    await asyncio.wait({runner})
    assert runner.cancelled() and t.cancelled == ["http://r0/generate"]


def test_no_suppress_base_exception_in_src() -> None:
    offenders = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py")
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"suppress\([^)]*BaseException", line)]
    assert offenders == []
