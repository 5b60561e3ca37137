"""A plain-text completions prompt goes to its server as text (no ``/tokenize`` round trip
first): the server's echoed ids are the prompt's everywhere (the answer's usage, the session's
context, the continued pieces), and the answer equals the one the tokenized path gives. Where
the ids are needed before the first piece (a streamed answer, a key with several free
sessions to choose between, ``--tokenize-prompts``), the proxy still asks ``/tokenize``."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from proxy_stub import CharTokenizer, char_ids, expected, long_prompt, stub_proxy

from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.engine.pieces import CHARS_PER_TOKEN
from tailsieve.runtime.proxy import RoutingProxy
from tailsieve.runtime.proxy.openai_api import parse_completions
from tailsieve.runtime.proxy.request import Api, PromptSpec
from tailsieve.runtime.proxy.text_prompts import TextPrompts


def _calls(proxy: RoutingProxy) -> list[dict[str, Any]]:
    svc = proxy.service
    assert svc is not None and isinstance(svc.tokenizer, CharTokenizer)
    return svc.tokenizer.calls


async def _complete(s: aiohttp.ClientSession, proxy: RoutingProxy, body: dict[str, Any],
                    key: str | None = None) -> dict[str, Any]:
    headers = {"X-Session-ID": key} if key else {}
    async with s.post(proxy.url + "/v1/completions", json={"model": "stub", **body},
                      headers=headers) as r:
        assert r.status == 200, await r.text()
        got: dict[str, Any] = await r.json()
    return got


@pytest.mark.parametrize("text_prompts", [True, False])
async def test_a_text_prompt_in_pieces_answers_as_the_tokenized_one(text_prompts: bool) -> None:
    text = "".join(chr(t) for t in long_prompt("tell me a long story", 40))
    proxy = await stub_proxy(piece_tokens=8, text_prompts=text_prompts)
    try:
        async with aiohttp.ClientSession() as s:
            got = await _complete(s, proxy, {"prompt": text, "max_tokens": 40,
                                             "return_token_ids": True})
        ids, _ = expected(char_ids(text), 40)
        ch = got["choices"][0]
        assert ch["token_ids"] == ids
        assert ch["prompt_token_ids"] == char_ids(text)
        assert got["usage"]["prompt_tokens"] == len(text)
        assert len(_calls(proxy)) == (0 if text_prompts else 1)
        svc = proxy.service
        assert svc is not None
        calls = svc.gateway.runner.calls  # type: ignore[attr-defined]
        assert len(calls) >= 2  # it ran in pieces: the later ones carry the echoed ids
        assert all(list(c.prompt_ids[:len(text)]) == char_ids(text) for c in calls)
        assert svc.text.num_tokens == (len(text) if text_prompts else 0)
    finally:
        await proxy.aclose()


async def test_a_keyed_session_keeps_its_echoed_context() -> None:
    proxy = await stub_proxy()
    try:
        async with aiohttp.ClientSession() as s:
            first = await _complete(s, proxy, {"prompt": "hello", "max_tokens": 8,
                                               "ignore_eos": True, "return_token_ids": True},
                                    key="k")
            ctx = char_ids("hello") + first["choices"][0]["token_ids"] + char_ids("more")
            await _complete(s, proxy, {"prompt": ctx, "max_tokens": 8}, key="k")
        svc = proxy.service
        assert svc is not None
        assert len(svc.table) == 1  # the second turn found the first one's session
        assert _calls(proxy) == []
    finally:
        await proxy.aclose()


async def test_streamed_or_a_choice_of_sessions_tokenizes_first() -> None:
    proxy = await stub_proxy()
    try:
        async with aiohttp.ClientSession() as s:
            body = {"model": "stub", "prompt": "a stream", "max_tokens": 4, "stream": True}
            async with s.post(proxy.url + "/v1/completions", json=body) as r:
                assert r.status == 200
                await r.read()
            assert [c["prompt"] for c in _calls(proxy)] == ["a stream"]
            await _complete(s, proxy, {"prompt": [1, 2, 3], "max_tokens": 4, "n": 2},
                            key="g")  # two sessions of key "g", both free now
            await _complete(s, proxy, {"prompt": "which one", "max_tokens": 4}, key="g")
            assert [c["prompt"] for c in _calls(proxy)] == ["a stream", "which one"]
    finally:
        await proxy.aclose()


def test_which_prompts_go_as_text_and_the_learned_estimate() -> None:
    tp = TextPrompts(True, Backend.VLLM)
    req = parse_completions({"prompt": "abcdefgh", "max_tokens": 4})
    assert tp.text_of(req, req.prompts[0]) == "abcdefgh"
    assert tp.estimate("x" * 3 * CHARS_PER_TOKEN) == 3  # the shared ratio before any echo
    tp.echoed("abcdefgh", tuple(range(8)))
    assert tp.estimate("abcdefghijkl") == 12  # then as the echoed prompts had it
    for body in ({"prompt": "x", "stream": True},
                 {"prompt": "x", "add_special_tokens": False}):
        r = parse_completions({"max_tokens": 4, **body})
        assert tp.text_of(r, r.prompts[0]) is None
    chat = PromptSpec(tokenize={"messages": [{"role": "user", "content": "x"}]})
    assert tp.text_of(req, chat) is None
    assert req.api is Api.COMPLETIONS
    assert TextPrompts(False, Backend.VLLM).text_of(req, req.prompts[0]) is None
    assert TextPrompts(True, Backend.SGLANG).text_of(req, req.prompts[0]) is None
