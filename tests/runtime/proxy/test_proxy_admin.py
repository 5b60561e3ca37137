"""The proxy's service routes: weight reloads and cache resets sent on to every server
(``fan_out_paths``, admin calls: sent to the admin listener), ``/tokenize`` answered by a
server, ``/v1/models`` as the servers list it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tailsieve.errors import ConfigError
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy
from tailsieve.runtime.sessions import GatewayConfig


class Fake:
    """A server that lists one model and answers /update_weights (or fails it)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[Any] = []
        self.url = ""

    async def start(self, stack: AsyncExitStack) -> None:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_post("/update_weights", self.update)
        app.router.add_post("/tokenize", self.tokenize)
        runner = web.AppRunner(app)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": "m", "object": "model", "max_model_len": 77}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def update(self, request: web.Request) -> web.Response:
        self.calls.append(await request.json())
        if self.fail:
            return web.json_response({"error": {"message": "no such checkpoint"}}, status=400)
        return web.json_response({"status": "ok"})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": [len(body["prompt"])], "count": 1})


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as st:
        yield st


async def proxy_over(stack: AsyncExitStack, fakes: list[Fake]) -> RoutingProxy:
    for f in fakes:
        await f.start(stack)
    cfg = ProxyConfig(endpoints=tuple(f.url for f in fakes), gateway=GatewayConfig(profile="cpu"))
    proxy = await stack.enter_async_context(RoutingProxy(cfg))
    await proxy.start()
    await proxy.start_admin()
    return proxy


async def test_weight_reloads_reach_every_server(stack: AsyncExitStack) -> None:
    fakes = [Fake(), Fake()]
    proxy = await proxy_over(stack, fakes)
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.admin_url + "/update_weights", json={"path": "/ckpt/7"}) as r:
            assert r.status == 200
            out = await r.json()
        assert [x["url"] for x in out["servers"]] == [f.url for f in fakes]
        assert all(f.calls == [{"path": "/ckpt/7"}] for f in fakes)
        async with s.post(proxy.url + "/tokenize", json={"prompt": "abc"}) as r:
            assert (await r.json())["tokens"] == [3]
        async with s.get(proxy.url + "/v1/models") as r:
            assert (await r.json())["data"][0]["max_model_len"] == 77
    assert proxy.service is not None and proxy.service.served.max_model_len == 77


async def test_a_failed_reload_is_a_502_naming_the_server(stack: AsyncExitStack) -> None:
    fakes = [Fake(), Fake(fail=True)]
    proxy = await proxy_over(stack, fakes)
    async with aiohttp.ClientSession() as s, \
            s.post(proxy.admin_url + "/update_weights", json={"path": "x"}) as r:
        assert r.status == 502
        msg = (await r.json())["error"]["message"]
    assert "1 of 2 servers" in msg and fakes[1].url in msg and "no such checkpoint" in msg


def test_fan_out_paths_are_checked() -> None:
    with pytest.raises(ConfigError, match="fan-out path"):
        ProxyConfig(endpoints=("http://a:1",), fan_out_paths=("/generate",))
    with pytest.raises(ConfigError, match="fan-out path"):
        ProxyConfig(endpoints=("http://a:1",), fan_out_paths=("update",))
