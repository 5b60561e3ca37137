"""Fixtures for the emulator tests: in-process servers and a metrics reader."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer

ServerFactory = Callable[..., AbstractAsyncContextManager[EmulatorServer]]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        yield s


@pytest.fixture
def make_server() -> ServerFactory:
    """``async with make_server(time_scale=0.1, ...) as srv`` (cpu profile by default)."""

    def factory(profile: str = "cpu", **kwargs: Any) -> EmulatorServer:
        return EmulatorServer(EmulatorConfig.from_profile(profile, **kwargs))

    return factory


@pytest.fixture
async def fast_server(make_server: ServerFactory) -> AsyncIterator[EmulatorServer]:
    """A cpu-profile emulator 100x faster than the model."""
    async with make_server(time_scale=0.01) as srv:
        yield srv


async def read_metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """Every sample of GET /metrics as ``{'name{k=v,...}': value}`` and ``{'name': value}``
    (the latter for series without extra labels beyond model_name/engine)."""
    async with session.get(f"{url}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            extra = {k: v for k, v in s.labels.items() if k not in ("model_name", "engine")}
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(extra.items())) + "}"
                            if extra else "")
            out[key] = s.value
    return out


@pytest.fixture
def metrics() -> Callable[[aiohttp.ClientSession, str], Any]:
    return read_metrics
