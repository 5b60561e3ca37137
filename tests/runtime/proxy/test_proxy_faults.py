"""Faults and bad requests at the proxy: a replica killed mid-request (its samples continue
elsewhere, exact, nothing lost or doubled), every replica dead (HTTP 503 naming it), a server
error beyond retries (HTTP 502 naming the server; mid-stream: an error event), malformed or
out-of-range requests (HTTP 4xx naming the field), and a client that goes away (its samples
stop)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from proxy_stub import STUB_MODEL, expected, long_prompt, stub_proxy, stub_text

from tailsieve.runtime.engine.transport import RequestError
from tailsieve.runtime.sessions import PieceOutput, PieceRequest
from tailsieve.runtime.stub import StubPieceRunner


async def post(url: str, body: Any, headers: dict[str, str] | None = None,
               ) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with s.post(url, data=data, headers={"Content-Type": "application/json",
                                                   **(headers or {})}) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except json.JSONDecodeError:
                return r.status, text


async def running_pieces(proxy: Any, n: int) -> None:
    svc = proxy.service
    while sum(len(t.pieces) for r in list(svc.runs) for t in r.traces) < n:
        await asyncio.sleep(0.005)


async def test_a_replica_killed_mid_request_continues_elsewhere_exactly() -> None:
    runner = StubPieceRunner(2, seconds_per_token=0.005)
    proxy = await stub_proxy(runner=runner)
    try:
        prompts = [long_prompt(f"prompt number {k}", 60) for k in range(6)]
        body = {"model": STUB_MODEL, "prompt": prompts, "max_tokens": 120,
                "return_token_ids": True}
        task = asyncio.create_task(post(proxy.url + "/v1/completions", body))
        await running_pieces(proxy, 4)
        runner.kill(0)
        status, out = await task
        assert status == 200, out
        for ch in out["choices"]:
            want, reason = expected(prompts[ch["index"]], 120)
            assert ch["token_ids"] == want and ch["finish_reason"] == reason
            assert ch["text"] == stub_text(want)
        st = proxy.service.gateway.stats()  # type: ignore[union-attr]
        assert st.num_relocations >= 1 and st.num_failed_turns == 0
        assert not st.replicas[0].healthy
        failed = [c for c in runner.calls if c.failed]
        assert failed and all(c.replica == 0 for c in failed)
    finally:
        await proxy.aclose()


async def test_every_replica_dead_is_a_503_that_says_so() -> None:
    runner = StubPieceRunner(2)
    proxy = await stub_proxy(runner=runner, no_replica_timeout_s=0.2)
    try:
        runner.kill(0)
        runner.kill(1)
        proxy.service.gateway.set_healthy(0, False)  # type: ignore[union-attr]
        proxy.service.gateway.set_healthy(1, False)  # type: ignore[union-attr]
        status, out = await post(proxy.url + "/v1/completions",
                                 {"model": STUB_MODEL, "prompt": "hi", "max_tokens": 5})
        assert status == 503
        assert "every server is down" in out["error"]["message"]
        async with aiohttp.ClientSession() as s, s.get(proxy.url + "/health") as r:
            assert r.status == 503
    finally:
        await proxy.aclose()


class FailingRunner(StubPieceRunner):
    """Stub replicas whose ``fail_at``-th piece answers a server error (after retries)."""

    def __init__(self, fail_at: int, **kw: Any) -> None:
        super().__init__(2, **kw)
        self.fail_at = fail_at
        self.num = 0

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        self.num += 1
        if self.num == self.fail_at:
            raise RequestError(f"http://stub-{replica}/v1/completions: HTTP 500: boom "
                               "(after 3 retries)", status=500, retryable=False)
        return await super().run_piece(replica, piece)


async def test_a_server_error_is_a_502_naming_the_server_and_nothing_is_delivered() -> None:
    proxy = await stub_proxy(runner=FailingRunner(3))
    try:
        status, out = await post(proxy.url + "/v1/completions",
                                 {"model": STUB_MODEL, "prompt": long_prompt("hello", 100), "max_tokens": 200,
                                  "n": 2})
        assert status == 502
        assert "stub-" in out["error"]["message"] and "HTTP 500" in out["error"]["message"]
        st = proxy.service.gateway.stats()  # type: ignore[union-attr]
        assert st.num_failed_turns == 2 and st.num_running == 0
    finally:
        await proxy.aclose()


async def test_a_server_error_mid_stream_is_an_error_event() -> None:
    proxy = await stub_proxy(runner=FailingRunner(2))
    try:
        events = []
        async with aiohttp.ClientSession() as s, s.post(
                proxy.url + "/v1/completions",
                json={"model": STUB_MODEL, "prompt": long_prompt("hello", 100),
                      "max_tokens": 300, "stream": True}) as r:
            assert r.status == 200
            async for line in r.content:
                if line.startswith(b"data: "):
                    events.append(line[6:].strip())
        assert events[-1] == b"[DONE]"
        err = json.loads(events[-2])
        assert err["error"]["code"] == 502 and "HTTP 500" in err["error"]["message"]
    finally:
        await proxy.aclose()


@pytest.mark.parametrize(("path", "body", "status", "names"), [
    ("/v1/completions", b"{not json", 400, "not valid JSON"),
    ("/v1/completions", {"model": STUB_MODEL}, 400, "prompt"),
    ("/v1/completions", {"model": "other", "prompt": "x"}, 404, "does not exist"),
    ("/v1/completions", {"prompt": "x", "n": 0}, 400, "'n'"),
    ("/v1/completions", {"prompt": "x", "top_p": 1.5}, 400, "top_p"),
    ("/v1/completions", {"prompt": "x", "logprobs": 21}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "x", "echo": True}, 400, "echo"),
    ("/v1/completions", {"prompt": [1, "a"]}, 400, "prompt"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"content": "x"}]}, 400, "role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "tool_choice": "required"}, 400, "tool_choice"),
    ("/generate", {"sampling_params": {}}, 400, "input_ids"),
    ("/generate", {"input_ids": [1, 2], "sampling_params": {"bogus": 1}}, 400, "bogus"),
    ("/generate", {"input_ids": [1, 2], "sampling_params": {"regex": "a+"}}, 400, "regex"),
    ("/generate", {"input_ids": [1, 2], "session_params": {"id": "s"}}, 400,
     "X-SMG-Routing-Key"),
    ("/generate", {"input_ids": [1, -2]}, 400, "input_ids"),
])
async def test_bad_requests_are_4xx_naming_the_problem(path: str, body: Any, status: int,
                                                      names: str) -> None:
    proxy = await stub_proxy()
    try:
        got, out = await post(proxy.url + path, body)
        assert got == status
        assert names in out["error"]["message"]
        assert out["error"]["code"] == status
        assert proxy.service.gateway.stats().num_turns == 0  # type: ignore[union-attr]
    finally:
        await proxy.aclose()


async def test_a_client_that_goes_away_stops_its_samples() -> None:
    runner = StubPieceRunner(2, seconds_per_token=0.01)
    proxy = await stub_proxy(runner=runner)
    svc = proxy.service
    assert svc is not None
    try:
        async with aiohttp.ClientSession() as s:
            req = s.post(proxy.url + "/v1/completions",
                         json={"model": STUB_MODEL, "prompt": long_prompt("a long one", 300),
                               "max_tokens": 2000, "n": 2})
            task = asyncio.create_task(req.__aenter__())
            await running_pieces(proxy, 1)
            task.cancel()
        while svc.runs or svc.gateway.stats().num_running:
            await asyncio.sleep(0.01)
        st = svc.gateway.stats()
        assert st.num_failed_turns == 2 and st.num_turns == 0
    finally:
        await proxy.aclose()
