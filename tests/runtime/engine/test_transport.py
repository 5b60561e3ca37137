"""``AiohttpTransport`` and ``LeanTransport`` error classification against a local aiohttp
server; the lean client's chunked bodies, dropped connections and cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tailsieve.runtime import event_loop
from tailsieve.runtime.engine.lean_http import LeanTransport
from tailsieve.runtime.engine.transport import AiohttpTransport, ReplicaDownError, RequestError

CANCELLED: list[str] = []
HELD: list[str] = []  # /hold requests the server has begun


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async with _serve() as url:
        yield url


@contextlib.asynccontextmanager
async def _serve() -> AsyncIterator[str]:
    """A test server on a free port: status codes, framings, drops, holds, SSE."""
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
        HELD.append(request.path)
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
    app.router.add_post("/empty", _empty)
    app.router.add_post("/engine-dead", engine_dead)
    app.router.add_post("/ok", ok)
    app.router.add_post("/slow", slow)
    app.router.add_post("/sse", sse)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
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
        assert await t.post_json(server + "/empty", {}, 5) is None  # SGLang's abort answer
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
        HELD.clear()
        task = asyncio.create_task(t.post_json(server + "/hold", {}, 60))
        while not HELD:  # the server is holding it (however long a loaded machine takes)
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(6000):  # closing the connection cancels the server's handler (<= 60 s)
            if CANCELLED:
                break
            await asyncio.sleep(0.01)
        assert CANCELLED == ["/hold"]
    finally:
        await t.aclose()


async def _raw_server(
    reply: list[bytes], delay_s: float = 0.0
) -> tuple[asyncio.Server, str, list[bytes]]:
    """A server that reads one request (head + Content-Length body) and writes ``reply`` piece
    by piece, then closes: HTTP framings aiohttp's server does not produce. Also returns the
    request bodies it got."""
    got: list[bytes] = []

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head = await r.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        got.append(await r.readexactly(length))
        for part in reply:
            w.write(part)
            await w.drain()
            await asyncio.sleep(delay_s)
        w.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}", got


async def test_lean_framings_and_a_large_request() -> None:
    t = LeanTransport()
    body = b'{"ok": [1, 2]}'
    cases = [
        [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", body[:5], body[5:]],  # to EOF
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n" + body[:5], b"\r\n",
         b"%x;ext=1\r\n" % (len(body) - 5) + body[5:] + b"\r\n", b"0\r\n", b"\r\n"],
        [b"HTTP/1.1 200", b" OK\r\nContent-Length: %d\r\n\r\n" % len(body), body],
    ]  # fmt: skip
    for reply in cases:
        srv, url, _ = await _raw_server(reply, delay_s=0.01)
        async with srv:
            assert await t.post_json(url + "/x", {"a": 1}, 5) == {"ok": [1, 2]}
    srv, url, _ = await _raw_server([b"HTTX/1.1\r\n\r\n"])
    async with srv:
        with pytest.raises(RequestError, match="bad status line"):
            await t.post_json(url + "/x", {}, 5)
    # a request far larger than a socket buffer is written in parts as the socket drains
    big = {"prompt": list(range(400_000))}
    srv, url, got = await _raw_server([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"])
    async with srv:
        assert await t.post_json(url + "/x", big, 10) == {}
        assert json.loads(got[0]) == big
    await t.aclose()


async def test_lean_host_names_take_the_streams_path(server: str) -> None:
    t = LeanTransport()
    try:
        url = server.replace("127.0.0.1", "localhost") + "/ok"
        assert await t.post_json(url, {"x": 2}, 5) == {"echo": {"x": 2}}
    finally:
        await t.aclose()


def test_every_case_on_uvloop() -> None:
    """The cases above on uvloop, the loop the runtime's entry points use when it is installed
    (``tailsieve.runtime.event_loop``): the lean client drives its sockets from loop callbacks."""
    pytest.importorskip("uvloop")

    async def main() -> str:
        assert event_loop.loop_name() == "uvloop"
        CANCELLED.clear()
        async with _serve() as url:
            for cls in (AiohttpTransport, LeanTransport):
                await test_classification(url, cls)
            await test_lean_chunked_dropped_and_cancelled(url)
            await test_lean_host_names_take_the_streams_path(url)
        await test_lean_framings_and_a_large_request()
        return "done"

    try:
        assert event_loop.run(main(), "uvloop") == "done"
    finally:
        CANCELLED.clear()  # as the other tests expect it


async def _empty(_: web.Request) -> web.Response:
    return web.Response(status=200)  # no body, as SGLang's /abort_request answers
