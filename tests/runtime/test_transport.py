"""``AiohttpTransport`` error classification against a local aiohttp server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tailsieve.runtime.transport import AiohttpTransport, ReplicaDownError, RequestError


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def status(request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        return web.Response(status=code, text="oops")

    async def garbage(_: web.Request) -> web.Response:
        return web.Response(text="not json")

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"echo": await request.json()})

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.json_response({})

    async def sse(_: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(_)
        for chunk in (
            b'data: {"a": 1}\n\n',
            b": comment\n\n",
            b'data: {"a": 2}\n\n',
            b"data: [DONE]\n\n",
        ):
            await resp.write(chunk)
        return resp

    app = web.Application()
    app.router.add_post("/status/{code}", status)
    app.router.add_post("/garbage", garbage)
    app.router.add_post("/ok", ok)
    app.router.add_post("/slow", slow)
    app.router.add_post("/sse", sse)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_classification(server: str) -> None:
    t = AiohttpTransport()
    try:
        assert await t.post_json(server + "/ok", {"x": 1}, 5) == {"echo": {"x": 1}}
        with pytest.raises(RequestError) as e500:
            await t.post_json(server + "/status/500", {}, 5)
        assert e500.value.retryable and e500.value.status == 500
        with pytest.raises(RequestError) as e400:
            await t.post_json(server + "/status/400", {}, 5)
        assert not e400.value.retryable
        with pytest.raises(ReplicaDownError, match="503"):
            await t.post_json(server + "/status/503", {}, 5)
        with pytest.raises(RequestError, match="malformed JSON"):
            await t.post_json(server + "/garbage", {}, 5)
        with pytest.raises(ReplicaDownError, match="timed out"):
            await t.post_json(server + "/slow", {}, 0.2)
        assert [c async for c in t.stream_json(server + "/sse", {}, 5)] == [{"a": 1}, {"a": 2}]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        with pytest.raises(ReplicaDownError):
            await t.post_json(f"http://127.0.0.1:{dead}/x", {}, 2)
        with pytest.raises(ReplicaDownError):
            await t.get(f"http://127.0.0.1:{dead}/health", 2)
    finally:
        await t.aclose()
