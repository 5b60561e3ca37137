"""The emulator schedules by request ``priority`` as vLLM does under ``--scheduling-policy
priority`` (lower first), and refuses a non-zero priority under FCFS as vLLM does."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tailsieve.errors import ConfigError
from tailsieve.runtime.emulator import EmulatorConfig
from tailsieve.runtime.emulator.runner import build_parser

ServerFactory = Any  # conftest.make_server
PROFILE = "qwen3-4b-h100"


async def _complete(session: aiohttp.ClientSession, url: str, tag: str, priority: int,
                    max_tokens: int, order: list[str]) -> None:
    body = {"prompt": list(range(100, 140)), "max_tokens": max_tokens, "ignore_eos": True,
            "priority": priority}
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        await resp.json()
    order.append(tag)


async def test_a_later_urgent_request_overtakes_the_queue(
    make_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    # one running slot: the first request runs at once, then the queue is served by priority
    # (a request that arrived later with a lower value goes first), not by arrival
    async with make_server(PROFILE, time_scale=1.0, max_num_seqs=1,
                           scheduling_policy="priority") as srv:
        order: list[str] = []
        first = asyncio.create_task(_complete(session, srv.url, "first", 0, 200, order))
        await asyncio.sleep(0.1)
        late = asyncio.create_task(_complete(session, srv.url, "lazy", 5, 5, order))
        await asyncio.sleep(0.05)
        urgent = asyncio.create_task(_complete(session, srv.url, "urgent", -5, 5, order))
        await asyncio.gather(first, late, urgent)
    assert order == ["first", "urgent", "lazy"]


async def test_fcfs_refuses_a_priority_as_vllm_does(
    make_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    async with make_server(PROFILE, time_scale=0.001) as srv:
        body = {"prompt": [1, 2, 3], "max_tokens": 2, "priority": 3}
        async with session.post(srv.url + "/v1/completions", json=body) as resp:
            assert resp.status == 400
            assert "Priority scheduling is not enabled" in (await resp.text())
        body["priority"] = 0
        async with session.post(srv.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200


def test_the_policy_is_validated_and_has_its_flag() -> None:
    with pytest.raises(ConfigError, match="scheduling_policy"):
        EmulatorConfig.from_profile(PROFILE, scheduling_policy="lifo")
    args = build_parser().parse_args(["--scheduling-policy", "priority"])
    assert args.scheduling_policy == "priority"
