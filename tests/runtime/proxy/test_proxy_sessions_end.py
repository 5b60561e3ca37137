"""Sessions end at the proxy: vLLM router's ``/finish_session`` ends a client's session key at
once (its tool wait stops counting as load at its home), and a session that only goes quiet
stops pinning load after the tool-wait horizon."""

from __future__ import annotations

from typing import Any

import aiohttp
from proxy_stub import char_ids, stub_proxy

from tailsieve.runtime.proxy import RoutingProxy


async def _turn(s: aiohttp.ClientSession, url: str, key: str, prompt: list[int]) -> None:
    body = {"model": "stub", "prompt": prompt, "max_tokens": 8, "ignore_eos": True}
    async with s.post(url + "/v1/completions", json=body, headers={"X-Session-ID": key}) as r:
        assert r.status == 200, await r.text()


def _tool_waits(proxy: RoutingProxy) -> int:
    svc = proxy.service
    assert svc is not None
    gw = svc.gateway
    return sum(v.num_tool_waits for v in gw.book.views(gw.now()))


async def test_finish_session_ends_the_key_and_its_tool_wait() -> None:
    proxy = await stub_proxy()
    try:
        async with aiohttp.ClientSession() as s:
            await _turn(s, proxy.url, "traj-1", char_ids("hello there"))
            await _turn(s, proxy.url, "traj-2", char_ids("general kenobi"))
            assert _tool_waits(proxy) == 2
            async with s.post(proxy.url + "/finish_session",
                              params={"session_id": "traj-1"}) as r:
                assert r.status == 200
                got: dict[str, Any] = await r.json()
            assert got == {"status": "ok", "session_id": "traj-1", "ended": 1}
            assert _tool_waits(proxy) == 1
            async with s.post(proxy.url + "/finish_session", json={"session_id": "traj-2"}) as r:
                assert r.status == 200 and (await r.json())["ended"] == 1
            assert _tool_waits(proxy) == 0
            assert proxy.service is not None and len(proxy.service.table) == 0
            async with s.post(proxy.url + "/finish_session", json={"session_id": "nobody"}) as r:
                assert (await r.json())["ended"] == 0
            async with s.post(proxy.url + "/finish_session") as r:
                assert r.status == 400
                assert "session_id" in (await r.json())["error"]["message"]
    finally:
        await proxy.aclose()


async def test_a_quiet_session_stops_pinning_load_after_the_horizon() -> None:
    proxy = await stub_proxy()
    try:
        async with aiohttp.ClientSession() as s:
            await _turn(s, proxy.url, "quiet", char_ids("a prompt"))
        svc = proxy.service
        assert svc is not None
        gw = svc.gateway
        book = gw.book
        now = gw.now()
        assert sum(v.num_tool_waits for v in book.views(now)) == 1
        later = now + book.tool_waits.horizon_s
        assert sum(v.num_tool_waits for v in book.views(later)) == 0
        assert len(svc.table) == 1  # the key is still known: its next turn goes home
    finally:
        await proxy.aclose()
