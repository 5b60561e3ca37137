"""Fixtures for the verl adapter tests (skipped without verl: bash scripts/setup_verl.sh)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

from tailsieve.integrations.loop_thread import LoopThread
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer


@pytest.fixture(scope="module")
def emulators() -> Iterator[list[str]]:
    """Two emulated vLLM replicas (fast clock, short drawn lengths) on a private loop."""
    loop = LoopThread("emulators")
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
