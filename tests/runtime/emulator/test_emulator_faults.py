"""Abort on disconnect, injected errors and crashes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import aiohttp
import pytest

from tailsieve.errors import ReplicaError
from tailsieve.runtime.emulator import CRASH_EXIT_CODE, EmulatorFleet


async def wait_for_metric(session: aiohttp.ClientSession, url: str, metrics: Any, name: str,
                          value: float, timeout_s: float = 60.0) -> float:
    """Poll /metrics until ``name == value``; returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        m = await metrics(session, url)
        if m[name] == value:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < timeout_s, f"{name} stuck at {m[name]} (want {value})"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("stream", [False, True])
async def test_disconnect_aborts(make_server: Any, metrics: Any, stream: bool) -> None:
    body = {"prompt": "hello", "max_tokens": 3000, "ignore_eos": True, "n": 2, "stream": stream}
    async with make_server(time_scale=1.0) as srv, aiohttp.ClientSession() as probe:
        client = aiohttp.ClientSession()

        async def call() -> None:
            async with client.post(srv.url + "/v1/completions", json=body) as resp:
                await resp.read()

        tasks = [asyncio.create_task(call()) for _ in range(4)]
        await wait_for_metric(probe, srv.url, metrics, "vllm:num_requests_running", 8)
        for t in tasks:
            t.cancel()
        await client.close()  # the client goes away mid-generation
        # freed by the abort, not by finishing: the tokens stop short of 8 x 3,000 (below)
        await wait_for_metric(probe, srv.url, metrics, "vllm:num_requests_running", 0)
        gen = (await metrics(probe, srv.url))["vllm:generation_tokens_total"]
        await asyncio.sleep(0.1)
        m = await metrics(probe, srv.url)
        assert 0 < gen == m["vllm:generation_tokens_total"] < 8 * 3000  # stopped growing
        assert m["vllm:request_success_total{finished_reason=length}"] == 0
        assert srv.driver.stats.num_aborted == 8
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks)


async def test_error_rate_one_gives_500(make_server: Any, session: aiohttp.ClientSession) -> None:
    async with make_server(time_scale=0.01, error_rate=1.0) as srv:
        async with session.post(srv.url + "/v1/completions", json={"prompt": "x"}) as resp:
            assert resp.status == 500
            err = (await resp.json())["error"]
        assert err["type"] == "InternalServerError" and err["code"] == 500
        async with session.get(srv.url + "/health") as resp:  # only generation fails
            assert resp.status == 200


async def test_error_rate_fraction_is_seeded(make_server: Any,
                                             session: aiohttp.ClientSession) -> None:
    async def statuses() -> list[int]:
        async with make_server(time_scale=0.01, error_rate=0.3, seed=11) as srv:
            out = []
            for _ in range(60):
                async with session.post(srv.url + "/v1/completions",
                                        json={"prompt": "x", "max_tokens": 2}) as resp:
                    out.append(resp.status)
            return out

    a, b = await statuses(), await statuses()
    assert a == b and set(a) == {200, 500}
    assert 8 <= a.count(500) <= 30


async def test_crash_close_mode_drops_connections(make_server: Any) -> None:
    body = {"prompt": "x", "max_tokens": 2000, "ignore_eos": True}
    async with make_server(time_scale=1.0, crash_after_s=0.3, crash_mode="close") as srv, \
            aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientError):
            async with s.post(srv.url + "/v1/completions", json=body) as resp:
                await resp.read()
        assert srv.crashed
        with pytest.raises(aiohttp.ClientError):
            async with s.get(srv.url + "/health") as resp:
                await resp.read()


def test_fleet_crash_exit_kills_process() -> None:
    with EmulatorFleet.start(2, time_scale=0.01, overrides=[{"crash_after": 1.0, "time_scale": 1.0}]) as fleet:
        dying, healthy = fleet.processes

        async def run() -> None:
            async with aiohttp.ClientSession() as s:
                async with s.get(healthy.url + "/health") as resp:
                    assert resp.status == 200
                with pytest.raises(aiohttp.ClientError):
                    body = {"prompt": "x", "max_tokens": 4000, "ignore_eos": True}
                    async with s.post(dying.url + "/v1/completions", json=body) as resp:
                        await resp.read()

        asyncio.run(run())
        assert dying.proc.wait(5) == CRASH_EXIT_CODE
        assert healthy.alive()
    assert not healthy.alive() and healthy.proc.returncode == 0  # clean SIGTERM shutdown


def test_fleet_start_failure_is_reported(tmp_path: Any) -> None:
    with pytest.raises(ReplicaError, match="did not start"):
        EmulatorFleet.start(1, profile=str(tmp_path / "missing.json"), startup_timeout_s=20)
