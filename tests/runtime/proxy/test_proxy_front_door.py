"""The proxy's front door through the real aiohttp app over stub replicas: admin calls only on
the admin listener or with the token, one JSON error for each kind of bad input (counted in
the metrics by reason), and a ``/health`` that is 503 until a server has answered."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from proxy_stub import STUB_LEN, char_ids, long_prompt, stub_proxy

from tailsieve.errors import ConfigError
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy
from tailsieve.runtime.proxy.guard import json_too_deep
from tailsieve.runtime.stub import StubPieceRunner

TOKEN = "s3cret-admin-token"


async def call(method: str, url: str, **kw: Any) -> tuple[int, Any, dict[str, str]]:
    async with aiohttp.ClientSession() as s, s.request(method, url, **kw) as r:
        text = await r.text()
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            body = text
        return r.status, body, dict(r.headers)


async def metrics(proxy: RoutingProxy) -> str:
    _, text, _ = await call("GET", proxy.url + "/metrics")
    assert isinstance(text, str)
    return text


def refusals(text: str, reason: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tailsieve_proxy_refusals_total{")
               and f'reason="{reason}"' in line)


def error(body: Any) -> dict[str, Any]:
    assert isinstance(body, dict) and set(body["error"]) >= {"message", "type", "code"}, body
    err: dict[str, Any] = body["error"]
    return err


# ----- admin calls --------------------------------------------------------------------------

async def test_admin_calls_are_refused_on_the_data_port_without_a_token() -> None:
    proxy = await stub_proxy()
    try:
        admin = await proxy.start_admin()
        for method, path, body in (("POST", "/abort_request", {"abort_all": True}),
                                   ("DELETE", "/workers/0", None),
                                   ("POST", "/workers", {"url": "http://10.0.0.9:1"}),
                                   ("POST", "/update_weights", {})):
            status, out, _ = await call(method, proxy.url + path, json=body)
            assert status == 403, (path, out)
            assert "admin listener" in error(out)["message"]
        assert proxy.gateway is not None and proxy.gateway.healthy() == (True, True)
        # an abort naming its own rid is a data call
        status, out, _ = await call("POST", proxy.url + "/abort_request", json={"rid": "r1"})
        assert (status, out) == (200, {"aborted": 0})
        status, out, _ = await call("POST", admin + "/abort_request", json={"abort_all": True})
        assert (status, out) == (200, {"aborted": 0})
        status, _, _ = await call("DELETE", admin + "/workers/0")
        assert status == 200 and proxy.gateway.healthy() == (False, True)
        assert refusals(await metrics(proxy), "forbidden") == 4
    finally:
        await proxy.aclose()


async def test_the_admin_token_is_required_on_the_data_port() -> None:
    proxy = await stub_proxy(admin_token=TOKEN)
    try:
        url = proxy.url + "/abort_request"
        status, out, headers = await call("POST", url, json={"abort_all": True})
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        assert "none was given" in error(out)["message"]
        status, out, _ = await call("POST", url, json={"abort_all": True},
                                    headers={"Authorization": "Bearer wrong"})
        assert status == 401 and "wrong" in error(out)["message"]
        for hdr in ({"Authorization": f"Bearer {TOKEN}"}, {"X-Admin-Token": TOKEN}):
            status, out, _ = await call("POST", url, json={"abort_all": True}, headers=hdr)
            assert (status, out) == (200, {"aborted": 0})
        assert refusals(await metrics(proxy), "unauthorized") == 2
    finally:
        await proxy.aclose()


async def test_a_rid_abort_on_the_data_port_ends_only_that_request() -> None:
    runner = StubPieceRunner(2, seconds_per_token=0.01)
    proxy = await stub_proxy(runner=runner)
    try:
        prompts = [long_prompt(f"story {k}:", 200, 300) for k in range(2)]
        async with aiohttp.ClientSession() as s:
            async def gen(k: int) -> Any:
                body = {"input_ids": prompts[k], "rid": f"rid-{k}",
                        "sampling_params": {"max_new_tokens": 300}}
                async with s.post(proxy.url + "/generate", json=body) as r:
                    return await r.json()
            tasks = [asyncio.create_task(gen(k)) for k in range(2)]
            svc = proxy.service
            assert svc is not None
            while sum(len(t.pieces) for r in list(svc.runs) for t in r.traces) < 2:
                await asyncio.sleep(0.01)
            async with s.post(proxy.url + "/abort_request", json={"rid": "rid-0"}) as r:
                assert await r.json() == {"aborted": 1}
            outs = await asyncio.gather(*tasks)
        assert outs[0]["meta_info"]["finish_reason"]["type"] == "abort"
        assert outs[1]["meta_info"]["finish_reason"]["type"] != "abort"
    finally:
        await proxy.aclose()


def test_an_empty_admin_token_is_refused() -> None:
    with pytest.raises(ConfigError, match="admin token"):
        ProxyConfig(endpoints=("http://a:1",), admin_token=" ")
    assert TOKEN not in repr(ProxyConfig(endpoints=("http://a:1",), admin_token=TOKEN))


# ----- bad input --------------------------------------------------------------------------------

async def test_deeply_nested_json_is_a_400_counted_in_the_metrics() -> None:
    proxy = await stub_proxy()
    try:
        deep = "[" * 1000 + "]" * 1000
        for path in ("/v1/completions", "/generate", "/tokenize"):
            status, out, _ = await call("POST", proxy.url + path, data=deep,
                                        headers={"Content-Type": "application/json"})
            assert status == 400 and "nested deeper than 100" in error(out)["message"], out
        text = await metrics(proxy)
        assert 'tailsieve_proxy_requests_total{code="400",route="completions"} 1.0' in text
        assert refusals(text, "json_depth") == 3
        # brackets inside a string are text, not nesting
        body = {"model": "stub", "prompt": "[" * 1000, "max_tokens": 4}
        status, out, _ = await call("POST", proxy.url + "/v1/completions", json=body)
        assert status == 200, out
    finally:
        await proxy.aclose()


def depth(v: Any) -> int:
    if isinstance(v, list):
        return 1 + max((depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((depth(x) for x in v.values()), default=0)
    return 0


JSON_VALUES = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ab,:\né'),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet='[]{}"\\a'), inner, max_size=3),
    max_leaves=30)


@given(JSON_VALUES, st.integers(0, 8), st.booleans())
def test_json_depth_is_the_parsed_value_s_depth(v: Any, limit: int, ascii_only: bool) -> None:
    raw = json.dumps(v, ensure_ascii=ascii_only).encode()
    assert json_too_deep(raw, limit) == (depth(v) > limit)


def test_json_depth_ignores_strings_and_escapes() -> None:
    assert not json_too_deep(b'{"a": "[[[[[[\\"[[[["}', 2)
    assert json_too_deep(b'{"a": [[["x"]]]}', 3)
    assert not json_too_deep(b'{"a": [[["x"]]]}', 4)
    assert not json_too_deep(b"[" * 5 + b"]" * 5, 5)


async def test_unknown_routes_and_methods_answer_json() -> None:
    proxy = await stub_proxy()
    try:
        status, out, _ = await call("POST", proxy.url + "/v1/nope", json={})
        assert status == 404 and error(out)["type"] == "NotFoundError"
        assert "POST /v1/nope" in error(out)["message"]
        status, out, headers = await call("GET", proxy.url + "/v1/completions")
        assert status == 405 and error(out)["type"] == "MethodNotAllowedError"
        assert "POST" in headers["Allow"]
        text = await metrics(proxy)
        assert 'tailsieve_proxy_requests_total{code="404",route="unmatched"} 1.0' in text
        assert refusals(text, "method_not_allowed") == 1
    finally:
        await proxy.aclose()


async def test_max_tokens_beyond_the_context_is_vllm_s_400() -> None:
    """vLLM 0.32's answers: max_tokens above the context and a prompt that fills it are 400s
    (``vllm/renderers/params.py``); prompt + max_tokens above it is cut to the room left
    (``get_max_tokens``)."""
    proxy = await stub_proxy()
    try:
        prompt = char_ids("hello there")
        body: dict[str, Any] = {"model": "stub", "prompt": prompt, "max_tokens": 10**9}
        status, out, _ = await call("POST", proxy.url + "/v1/completions", json=body)
        assert status == 400 and error(out)["param"] == "max_tokens"
        assert error(out)["message"] == (
            f"max_tokens={10**9} cannot be greater than max_model_len={STUB_LEN}. Please "
            "request fewer output tokens.")
        chat = {"model": "stub", "max_completion_tokens": 10**9,
                "messages": [{"role": "user", "content": "hi"}]}
        status, out, _ = await call("POST", proxy.url + "/v1/chat/completions", json=chat)
        assert status == 400 and error(out)["message"].startswith(
            f"max_completion_tokens={10**9} cannot be greater than max_model_len")
        gen = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 10**9}}
        status, out, _ = await call("POST", proxy.url + "/generate", json=gen)
        assert status == 400 and "max_new_tokens" in error(out)["message"]
        body = {"model": "stub", "prompt": [7] * STUB_LEN, "max_tokens": 1}
        status, out, _ = await call("POST", proxy.url + "/v1/completions", json=body)
        assert status == 400 and error(out)["message"].startswith(
            f"This model's maximum context length is {STUB_LEN} tokens. However, your prompt "
            f"contains {STUB_LEN} input tokens")
        assert refusals(await metrics(proxy), "context_length") == 4
        long = [7] * (STUB_LEN - 3)
        body = {"model": "stub", "prompt": long, "max_tokens": 50, "ignore_eos": True}
        status, out, _ = await call("POST", proxy.url + "/v1/completions", json=body)
        assert status == 200 and out["usage"]["completion_tokens"] <= 3, out
    finally:
        await proxy.aclose()


@pytest.mark.parametrize("content", [{"text": "hi"}, 7, ["hi"], [{"text": "no type"}]])
async def test_chat_content_must_be_a_string_or_parts(content: Any) -> None:
    proxy = await stub_proxy()
    try:
        body = {"model": "stub", "max_tokens": 4,
                "messages": [{"role": "user", "content": content}]}
        status, out, _ = await call("POST", proxy.url + "/v1/chat/completions", json=body)
        assert status == 400 and "messages[0].content" in error(out)["message"], out
    finally:
        await proxy.aclose()


async def test_a_body_over_the_limit_is_a_413() -> None:
    proxy = await stub_proxy(max_body_bytes=1000)
    try:
        body = {"model": "stub", "prompt": "x" * 2000, "max_tokens": 4}
        status, out, _ = await call("POST", proxy.url + "/v1/completions", json=body)
        assert status == 413 and "limit of 1000 bytes" in error(out)["message"]

        async def chunks() -> Any:  # no Content-Length: caught while reading
            for _ in range(4):
                yield b"x" * 500
        status, out, _ = await call("POST", proxy.url + "/v1/completions", data=chunks())
        assert status == 413, out
        assert refusals(await metrics(proxy), "body_too_large") == 2
    finally:
        await proxy.aclose()
    assert ProxyConfig(endpoints=("http://a:1",)).max_body_bytes == 64 << 20


async def test_slow_headers_and_bodies_time_out() -> None:
    proxy = await stub_proxy(read_timeout_s=0.2)
    try:
        host, port = proxy.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # headers never end
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed
        writer.close()
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 100\r\n\r\n{\"model\"")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 408")
        writer.close()
        assert refusals(await metrics(proxy), "read_timeout") == 1
    finally:
        await proxy.aclose()


async def test_requests_beyond_max_concurrency_are_429() -> None:
    runner = StubPieceRunner(2, seconds_per_token=0.01)
    proxy = await stub_proxy(runner=runner, max_concurrency=1)
    try:
        body = {"model": "stub", "prompt": long_prompt("a long one", 100, 200),
                "max_tokens": 200}
        async with aiohttp.ClientSession() as s:
            first = asyncio.create_task(s.post(proxy.url + "/v1/completions", json=body))
            while proxy.front.num_in_flight < 1:
                await asyncio.sleep(0.005)
            async with s.post(proxy.url + "/v1/completions", json=body) as r:
                assert r.status == 429
                assert "--max-concurrency 1" in error(await r.json())["message"]
            async with s.get(proxy.url + "/health") as r:  # not a generation request
                assert r.status == 200
            async with await first as r:
                assert r.status == 200
        assert proxy.front.num_in_flight == 0
        assert refusals(await metrics(proxy), "max_concurrency") == 1
    finally:
        await proxy.aclose()


# ----- health -------------------------------------------------------------------------------

async def test_health_is_503_until_a_server_answers_and_says_why() -> None:
    runner = StubPieceRunner(2)
    runner.kill(0)
    runner.kill(1)
    proxy = await stub_proxy(runner=runner)
    try:
        assert proxy.gateway is not None and proxy.gateway.healthy() == (False, False)
        status, out, _ = await call("GET", proxy.url + "/health")
        assert status == 503 and "no server is in service" in error(out)["message"]
        assert [s["in_service"] for s in out["servers"]] == [False, False]
        assert all("did not answer the start-up probe" in s["last_error"]
                   for s in out["servers"])
        text = await metrics(proxy)
        assert 'tailsieve_replica_state{reason="ReplicaError",replica="0",state="out"}' in text
        runner.revive(1)  # the gateway's probe lets it in
        while not proxy.gateway.healthy()[1]:
            await asyncio.sleep(0.01)
        status, out, _ = await call("GET", proxy.url + "/health")
        assert status == 200 and out["status"] == "ok"
        assert [s["in_service"] for s in out["servers"]] == [False, True]
        assert out["servers"][1]["since"].endswith("Z")
        text = await metrics(proxy)
        assert 'tailsieve_replica_state{reason="",replica="1",state="in"}' in text
    finally:
        await proxy.aclose()
