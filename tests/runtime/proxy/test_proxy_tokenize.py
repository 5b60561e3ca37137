"""The proxy tokenizes through the engine client (``HttpTokenizer`` over
``HttpPieceRunner.tokenize`` / ``tokenize_chat``): it asks a healthy server, the next one on a
replica fault; a server's 4xx is the client's error with the server's message; the request's
chat template options and ``add_special_tokens`` reach the server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
from aiohttp import web

from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.proxy import HttpTokenizer
from tailsieve.runtime.proxy.api_error import ApiError
from tailsieve.runtime.proxy.openai_api import parse_chat, parse_completions


class TokenizeServer:
    """A server whose ``/tokenize`` answers one id per character of the prompt (or of each
    message), or fails with ``status`` and ``body``."""

    def __init__(self, status: int = 200, body: Any = None) -> None:
        self.status, self.body = status, body
        self.calls: list[dict[str, Any]] = []
        self.url = ""

    async def start(self, stack: AsyncExitStack) -> str:
        app = web.Application()
        app.router.add_post("/tokenize", self.tokenize)
        runner = web.AppRunner(app)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        return self.url

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(body)
        if self.status != 200:
            return web.json_response(self.body, status=self.status)
        text = body["prompt"] if "prompt" in body else "".join(
            m["content"] for m in body["messages"])
        return web.json_response({"tokens": [ord(c) for c in text], "count": len(text)})


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as st:
        yield st


async def tokenizer_over(stack: AsyncExitStack, servers: list[TokenizeServer],
                         healthy: list[bool] | None = None,
                         backend: Backend = Backend.VLLM) -> HttpTokenizer:
    urls = [await s.start(stack) for s in servers]
    runner = HttpPieceRunner(urls, backend, "m", tokenize_timeout_s=30.0)
    stack.push_async_callback(runner.aclose)
    ok = healthy or [True] * len(servers)
    return HttpTokenizer(runner, lambda: ok)


async def test_chat_template_options_and_special_tokens_reach_the_server(
        stack: AsyncExitStack) -> None:
    server = TokenizeServer()
    tok = await tokenizer_over(stack, [server])
    chat = parse_chat({"messages": [{"role": "user", "content": "hi"}],
                       "chat_template_kwargs": {"enable_thinking": False},
                       "continue_final_message": False})
    assert chat.prompts[0].tokenize is not None
    assert await tok.tokenize(chat.prompts[0].tokenize) == (ord("h"), ord("i"))
    assert server.calls[-1] == {
        "messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True,
        "chat_template_kwargs": {"enable_thinking": False}, "continue_final_message": False,
        "model": "m"}
    for add in (False, True):
        text = parse_completions({"prompt": "abc", "add_special_tokens": add})
        assert text.prompts[0].tokenize is not None
        assert await tok.tokenize(text.prompts[0].tokenize) == (97, 98, 99)
        assert server.calls[-1] == {"prompt": "abc", "add_special_tokens": add, "model": "m"}


async def test_sglang_servers_are_asked_without_a_model(stack: AsyncExitStack) -> None:
    server = TokenizeServer()
    tok = await tokenizer_over(stack, [server], backend=Backend.SGLANG)
    assert await tok.tokenize({"prompt": "ab", "add_special_tokens": True}) == (97, 98)
    assert server.calls == [{"prompt": "ab", "add_special_tokens": True}]


async def test_a_replica_fault_asks_the_next_healthy_server(stack: AsyncExitStack) -> None:
    down, out, up = TokenizeServer(503, {"error": "gone"}), TokenizeServer(), TokenizeServer()
    tok = await tokenizer_over(stack, [down, out, up], healthy=[True, False, True])
    for _ in range(3):  # whichever it starts at, the answer comes from the healthy one
        assert await tok.tokenize({"prompt": "x", "add_special_tokens": True}) == (120,)
    assert down.calls and not out.calls and len(up.calls) == 3


async def test_every_healthy_server_failing_is_a_bad_gateway_naming_each(
        stack: AsyncExitStack) -> None:
    a, b = TokenizeServer(503, {"error": "gone"}), TokenizeServer(500, {"error": "boom"})
    tok = await tokenizer_over(stack, [a, b])
    with pytest.raises(ApiError) as err:
        await tok.tokenize({"prompt": "x"})
    assert err.value.status == 502 and a.url in str(err.value) and b.url in str(err.value)


async def test_a_servers_4xx_is_the_clients_error_with_its_message(
        stack: AsyncExitStack) -> None:
    bad = TokenizeServer(400, {"error": {"message": "prompt is 9000 tokens, limit 4096"}})
    other = TokenizeServer()
    tok = await tokenizer_over(stack, [bad, other], healthy=[True, False])
    with pytest.raises(ApiError) as err:
        await tok.tokenize({"prompt": "x"})
    assert err.value.status == 400 and "prompt is 9000 tokens, limit 4096" in str(err.value)
    assert not other.calls  # the prompt is refused, not the server


async def test_a_server_without_tokenize_no_server_and_no_tokens(
        stack: AsyncExitStack) -> None:
    missing, empty = TokenizeServer(404, {"detail": "Not Found"}), TokenizeServer()
    tok = await tokenizer_over(stack, [missing, empty], healthy=[True, False])
    with pytest.raises(ApiError, match="has no /tokenize") as err:
        await tok.tokenize({"prompt": "x"})
    assert err.value.status == 502
    none = HttpTokenizer(tok.runner, lambda: [False, False])
    with pytest.raises(ApiError, match="no healthy server") as err:
        await none.tokenize({"prompt": "x"})
    assert err.value.status == 503
    only_empty = HttpTokenizer(tok.runner, lambda: [False, True])
    with pytest.raises(ApiError, match="no tokens") as err:
        await only_empty.tokenize({"prompt": ""})
    assert err.value.status == 400
