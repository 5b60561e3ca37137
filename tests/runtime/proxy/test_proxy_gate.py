"""The proxy feeds the balance gate from windows of turns (``PaceWindows``): windows with
moves and the gate's calibration windows without, each timed per output token."""

from __future__ import annotations

import aiohttp
from proxy_stub import char_ids, stub_proxy


async def test_the_proxy_feeds_the_gate_per_window_of_turns() -> None:
    proxy = await stub_proxy(gate_window_turns=1)
    try:
        svc = proxy.service
        assert svc is not None
        turn = [0]
        modes: dict[int, set[bool]] = {}
        svc.on_piece = lambda sid, span: modes.setdefault(turn[0], set()).add(
            svc.gateway.mid_turn_moves)
        async with aiohttp.ClientSession() as s:
            for k in range(4):
                turn[0] = k
                body = {"model": "stub", "prompt": char_ids(f"turn {k}"), "max_tokens": 16,
                        "ignore_eos": True}
                async with s.post(proxy.url + "/v1/completions", json=body,
                                  headers={"X-Session-ID": "a"}) as r:
                    assert r.status == 200, await r.text()
        assert modes[0] == {True} and modes[1] == {False}  # window 1: the calibration
        assert modes[2] == {True}
        st = svc.gateway.gate.state
        assert len(st.balanced) == 2 and len(st.round_robin) == 1  # windows 0-2 timed
        assert all(x > 0 for x in st.balanced + st.round_robin)
    finally:
        await proxy.aclose()
