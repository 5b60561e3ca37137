"""JSON shapes of the emulator's vLLM endpoints (matched to docs/vllm-cpu-notes.md)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tailsieve.runtime.emulator import EmulatorServer
from tailsieve.runtime.emulator.responses import FILLER


async def post(session: aiohttp.ClientSession, url: str, body: Any,
               path: str = "/v1/completions") -> tuple[int, Any]:
    async with session.post(url + path, json=body) as resp:
        return resp.status, await resp.json()


async def sse(session: aiohttp.ClientSession, url: str, body: Any,
              path: str = "/v1/completions") -> list[Any]:
    async with session.post(url + path, json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        text = await resp.text()
    events = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def test_completion_shape_and_exact_tokens(fast_server: EmulatorServer,
                                                 session: aiohttp.ClientSession) -> None:
    body = {"model": "tailsieve-emulated", "prompt": "hello world", "max_tokens": 50,
            "ignore_eos": True, "n": 4, "temperature": 0.7, "seed": 1}
    status, out = await post(session, fast_server.url, body)
    assert status == 200
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    assert out["model"] == "tailsieve-emulated" and isinstance(out["created"], int)
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    for c in out["choices"]:
        assert set(c) >= {"index", "text", "logprobs", "finish_reason", "stop_reason"}
        assert c["finish_reason"] == "length" and c["logprobs"] is None
        assert c["text"] == FILLER * 50
    assert out["usage"]["prompt_tokens"] == 2
    assert out["usage"]["completion_tokens"] == 200
    assert out["usage"]["total_tokens"] == 202


async def test_batch_of_token_prompts(fast_server: EmulatorServer,
                                      session: aiohttp.ClientSession) -> None:
    body = {"prompt": [[956, 495], [223, 19, 20]], "max_tokens": 5, "ignore_eos": True, "n": 2,
            "return_token_ids": True, "logprobs": 0}
    status, out = await post(session, fast_server.url, body)
    assert status == 200
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    assert out["choices"][2]["prompt_token_ids"] == [223, 19, 20]
    assert all(len(c["token_ids"]) == 5 for c in out["choices"])
    assert all(len(c["logprobs"]["tokens"]) == 5 for c in out["choices"])
    assert out["usage"] == {"prompt_tokens": 5, "completion_tokens": 20, "total_tokens": 25,
                            "prompt_tokens_details": None, "completion_tokens_details": None}


async def test_chat_shape(fast_server: EmulatorServer, session: aiohttp.ClientSession) -> None:
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 20,
            "ignore_eos": True, "n": 2, "seed": 3}
    status, out = await post(session, fast_server.url, body, "/v1/chat/completions")
    assert status == 200
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    assert out["choices"][1]["message"]["role"] == "assistant"
    assert out["choices"][1]["message"]["content"] == FILLER * 20
    assert out["usage"]["prompt_tokens"] == 9  # as vLLM's ChatML template on the tiny model
    assert out["usage"]["completion_tokens"] == 40


async def test_stream_one_chunk_per_token(fast_server: EmulatorServer,
                                          session: aiohttp.ClientSession) -> None:
    body = {"prompt": "hello", "max_tokens": 30, "ignore_eos": True, "n": 3, "stream": True,
            "stream_options": {"include_usage": True}}
    chunks = await sse(session, fast_server.url, body)
    *token_chunks, last = chunks
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 90
    per_index: dict[int, list[Any]] = {0: [], 1: [], 2: []}
    for ch in token_chunks:
        assert ch["object"] == "text_completion" and len(ch["choices"]) == 1
        per_index[ch["choices"][0]["index"]].append(ch["choices"][0])
    for got in per_index.values():
        assert len(got) == 30 and all(c["text"] == FILLER for c in got)
        assert [c["finish_reason"] for c in got] == [None] * 29 + ["length"]


async def test_stream_interval_sends_tokens_in_chunks(fast_server: EmulatorServer,
                                                     session: aiohttp.ClientSession) -> None:
    """vLLM's per-request ``stream_interval``: the first token at once, then chunks of at least
    that many tokens, the rest with the finish reason; every token exactly once."""
    body = {"prompt": "hello", "max_tokens": 50, "ignore_eos": True, "stream": True,
            "stream_interval": 8, "return_token_ids": True}
    chunks = await sse(session, fast_server.url, body)
    got = [c["choices"][0] for c in chunks if c["choices"]]
    sizes = [len(c["token_ids"]) for c in got]
    assert sum(sizes) == 50 and all(len(c["text"]) == len(FILLER) * n
                                    for c, n in zip(got, sizes, strict=True))
    assert sizes == [1, 8, 8, 8, 8, 8, 8, 1]  # the first token, whole chunks, the rest
    assert [c["finish_reason"] for c in got] == [None] * (len(got) - 1) + ["length"]
    bad = dict(body, stream_interval=0)
    async with session.post(f"{fast_server.url}/v1/completions", json=bad) as resp:
        assert resp.status == 400 and "stream_interval" in (await resp.text())


async def test_chat_stream(fast_server: EmulatorServer, session: aiohttp.ClientSession) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10,
            "ignore_eos": True, "stream": True}
    chunks = await sse(session, fast_server.url, body, "/v1/chat/completions")
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    assert text == FILLER * 10
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_drawn_lengths_seeded_and_capped(fast_server: EmulatorServer,
                                               session: aiohttp.ClientSession) -> None:
    body = {"prompt": "hello", "max_tokens": 300, "n": 16, "seed": 5}
    _, a = await post(session, fast_server.url, body)
    _, b = await post(session, fast_server.url, body)
    lens = [len(c["text"]) // len(FILLER) for c in a["choices"]]
    assert lens == [len(c["text"]) // len(FILLER) for c in b["choices"]]
    assert len(set(lens)) > 1 and all(1 <= k <= 300 for k in lens)
    assert a["usage"]["completion_tokens"] == sum(lens)
    for k, c in zip(lens, a["choices"], strict=True):
        assert c["finish_reason"] == ("length" if k == 300 else "stop")


async def test_context_length_clipping_and_errors(make_server: Any,
                                                  session: aiohttp.ClientSession) -> None:
    async with make_server(time_scale=0.01, max_model_len=64) as srv:
        status, out = await post(session, srv.url, {"prompt": [1] * 10, "max_tokens": 60,
                                                    "ignore_eos": True})
        assert status == 200 and out["usage"]["completion_tokens"] == 54  # silently clipped
        status, out = await post(session, srv.url, {"prompt": "x", "max_tokens": 65})
        assert status == 400 and out["error"]["type"] == "BadRequestError"
        assert "max_model_len=64" in out["error"]["message"]
        status, out = await post(session, srv.url, {"model": "wrong", "prompt": "x"})
        assert status == 404
        assert out["error"] == {"message": "The model `wrong` does not exist. Valid aliases: "
                                "tailsieve-emulated.", "type": "NotFoundError",
                                "param": "model", "code": 404}
        for bad in ({"max_tokens": 5}, {"prompt": "x", "n": 0}, {"prompt": "x", "seed": "a"},
                    {"prompt": 3}, {"prompt": "x", "max_tokens": 0}):
            status, out = await post(session, srv.url, bad)
            assert status == 400, bad
            assert out["error"]["code"] == 400
        async with session.post(srv.url + "/v1/completions", data=b"{nope") as resp:
            assert resp.status == 400


async def test_models_health_version_load(fast_server: EmulatorServer,
                                          session: aiohttp.ClientSession) -> None:
    async with session.get(fast_server.url + "/health") as resp:
        assert resp.status == 200 and await resp.read() == b""
    async with session.get(fast_server.url + "/v1/models") as resp:
        models = await resp.json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "tailsieve-emulated"
    assert models["data"][0]["max_model_len"] == 4096
    async with session.get(fast_server.url + "/load") as resp:
        assert await resp.json() == {"server_load": 0}
    async with session.get(fast_server.url + "/version") as resp:
        assert "version" in await resp.json()


async def test_min_tokens_floor(fast_server: EmulatorServer,
                                session: aiohttp.ClientSession) -> None:
    body = {"prompt": "hello", "max_tokens": 300, "min_tokens": 250, "n": 8, "seed": 2}
    _, out = await post(session, fast_server.url, body)
    assert all(len(c["text"]) // len(FILLER) >= 250 for c in out["choices"])


async def test_port_in_use_is_an_error(fast_server: EmulatorServer, make_server: Any) -> None:
    server = make_server(time_scale=0.01)
    server.port = fast_server.port
    with pytest.raises(OSError):
        await server.start()
    assert server.driver._task.task is None  # nothing left running
