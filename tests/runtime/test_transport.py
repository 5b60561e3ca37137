"""``AiohttpTransport`` and ``LeanTransport`` error classification against a local aiohttp
server; the lean client's chunked bodies, dropped connections and cancellation."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tailsieve.runtime.lean_http import LeanTransport
from tailsieve.runtime.transport import AiohttpTransport, ReplicaDownError, RequestError

CANCELLED: list[str] = []


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def status(request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        return web.Response(status=code, text="oops")

    async def engine_dead(_: web.Request) -> web.Response:
        # what vLLM's API server answers once its EngineCore process has died
        body = {"error": {"message": "EngineCore encountered an issue. See stack trace (above) "
                          "for the root cause.", "type": "InternalServerError", "code": 500}}
        return web.json_response(body, status=500)

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

    async def chunked(_: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(_)
        for part in (b'{"ids": [', b"1, 2, 3", b"]}"):
            await resp.write(part)
        return resp

    async def drop(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Length": "100"})
        await resp.prepare(request)
        await resp.write(b'{"partial": ')
        assert request.transport is not None
        request.transport.abort()
        return resp

    async def hold(request: web.Request) -> web.Response:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            CANCELLED.append(request.path)
            raise
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/chunked", chunked)
    app.router.add_post("/drop", drop)
    app.router.add_post("/hold", hold)
    app.router.add_post("/status/{code}", status)
    app.router.add_post("/garbage", garbage)
    app.router.add_post("/engine-dead", engine_dead)
    app.router.add_post("/ok", ok)
    app.router.add_post("/slow", slow)
    app.router.add_post("/sse", sse)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.mark.parametrize("cls", [AiohttpTransport, LeanTransport])
async def test_classification(server: str, cls: type[AiohttpTransport]) -> None:
    t = cls()
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
        with pytest.raises(ReplicaDownError, match="engine died"):
            await t.post_json(server + "/engine-dead", {}, 5)
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


async def test_lean_chunked_dropped_and_cancelled(server: str) -> None:
    t = LeanTransport()
    try:
        assert await t.post_json(server + "/chunked", {}, 5) == {"ids": [1, 2, 3]}
        with pytest.raises(ReplicaDownError, match="IncompleteRead"):
            await t.post_json(server + "/drop", {}, 5)
        task = asyncio.create_task(t.post_json(server + "/hold", {}, 60))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(50):  # closing the connection cancels the server's handler
            if CANCELLED:
                break
            await asyncio.sleep(0.05)
        assert CANCELLED == ["/hold"]
    finally:
        await t.aclose()
