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


@pytest.fixture(scope="module")
def slow_sglang_workers() -> Iterator[list[str]]:
    """Three workers slow enough for a step to re-balance (a 64-token response takes about a
    second), the first at half the others' speed."""
    loop = LoopThread("sglang-emulators-slow")
    servers = [
        EmulatorServer(
            EmulatorConfig.from_profile(
                "cpu", time_scale=6.0, seed=20 + i, length_median_tokens=30.0,
                max_model_len=1024, slowdown=2.0 if i == 0 else 1.0,
            )
        )
        for i in range(3)
    ]
    urls = [loop.run(s.start()) for s in servers]
    yield urls
    for s in servers:
        loop.run(s.aclose())
    loop.close()
