"""A hung server behind ``tailsieve serve`` (issue: with one replica SIGSTOPped, half the
requests waited for the hour-long piece timeout while the replica read healthy): with the
default settings every response of the SIGSTOPped replica finishes elsewhere within 60 s,
whole and exact, and the replica reads out of service."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator

import aiohttp
import pytest

from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy

MODEL = "tailsieve-emulated"
LENGTH = 1500  # tokens per response: ~10-20 s of decoding on the emulated cpu profile


@pytest.fixture
def fleet() -> Iterator[EmulatorFleet]:
    f = EmulatorFleet.start(3, profile="cpu", time_scale=1.0, model_name=MODEL)
    try:
        yield f
    finally:
        for p in f.processes:  # by PID: whatever the test left stopped
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
        f.close()


async def running_on(url: str) -> None:
    async with aiohttp.ClientSession() as probe:
        while True:
            async with probe.get(url + "/metrics") as r:
                text = await r.text()
            if any(line.startswith("vllm:num_requests_running")
                   and float(line.rsplit(" ", 1)[1]) > 0 for line in text.splitlines()):
                return
            await asyncio.sleep(0.02)


@pytest.mark.slow
async def test_every_response_of_a_sigstopped_server_finishes_elsewhere_within_60_s(
        fleet: EmulatorFleet) -> None:
    victim = fleet.processes[0]
    cfg = ProxyConfig(endpoints=tuple(fleet.urls), backend=Backend.VLLM)  # default settings
    async with RoutingProxy(cfg) as proxy, aiohttp.ClientSession() as s:
        await proxy.start()

        async def one(k: int) -> tuple[int, int, str, float]:
            body = {"model": MODEL, "prompt": [11, 12, 13, k], "max_tokens": LENGTH,
                    "ignore_eos": True, "return_token_ids": True}
            async with s.post(proxy.url + "/v1/completions", json=body) as r:
                out = await r.json()
            ch = out["choices"][0]
            return r.status, len(ch["token_ids"]), ch["finish_reason"], time.monotonic()

        calls = asyncio.gather(*(one(k) for k in range(8)))
        await running_on(victim.url)
        os.kill(victim.pid, signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            got = await asyncio.wait_for(calls, 180)
            gw = proxy.service.gateway
            assert gw is not None and gw.healthy()[0] is False
            st = gw.stats()
        finally:
            os.kill(victim.pid, signal.SIGCONT)
    # every request answered once, whole: exact lengths (nothing lost or generated twice)
    assert [(c, n, r) for c, n, r, _ in got] == [(200, LENGTH, "length")] * 8
    assert st.num_relocations >= 1 and st.num_failed_turns == 0
    last = max(t for *_, t in got) - t_stop
    print(f"every response finished {last:.1f} s after the SIGSTOP "
          f"({st.num_relocations} relocations)")
    assert last <= 60.0
