"""Emulated SGLang workers (the emulator's /generate) on a private event loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tailsieve.integrations.loop_thread import LoopThread
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer


@pytest.fixture(scope="module")
def sglang_workers() -> Iterator[list[str]]:
    loop = LoopThread("sglang-emulators")
    servers = [
        EmulatorServer(
            EmulatorConfig.from_profile(
                "cpu", time_scale=0.01, seed=i, length_median_tokens=12.0, max_model_len=1024
            )
        )
        for i in range(2)
    ]
    urls = [loop.run(s.start()) for s in servers]
    yield urls
    for s in servers:
        loop.run(s.aclose())
    loop.close()
