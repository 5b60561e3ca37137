"""The proxy over two real vLLM CPU servers serving the real model (SmolLM2-135M-Instruct).

The ``openai`` client's answers through the proxy, with the turn moved to the other server at
every seam (pieces of 8 tokens), are checked two ways: exactly against the wire (each
continued piece's prompt is the prompt plus the tokens before it; the answer is the pieces'
tokens, text and logprobs joined), and against the same request generated in one go on one
server with vLLM's own comparison (``engine_outputs.check_logprobs_close``: greedy decoding is
not batch-invariant, so a near-tie may flip). The proxy's answers have the servers' JSON
shapes (the same keys). Skips with the reason when ``TAILSIEVE_REAL_ENDPOINTS`` is unset::

    TAILSIEVE_REAL_ENDPOINTS=http://127.0.0.1:8111,http://127.0.0.1:8112 \\
    pytest -m vllm tests/runtime/proxy/test_proxy_vllm.py
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Hashable
from typing import Any

import aiohttp
import pytest
from engine_outputs import LOGPROB_ATOL, EngineOutput, check_logprobs_close
from openai import AsyncOpenAI
from proxy_wire import Wire, check_chain
from real_servers import REAL_ENDPOINTS, REAL_MODEL, needs_real

from tailsieve.runtime.execution.result import PieceSpan
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy
from tailsieve.runtime.sessions import GatewayConfig

pytestmark = [pytest.mark.vllm, needs_real(2)]
PROMPT = "Once upon a time, in a small village by the sea, there lived"
MAX_TOKENS, TOP_K = 40, 5
MSGS = [{"role": "user", "content": "Name three colors of the rainbow."}]


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[RoutingProxy, Wire, list[Any]]]:
    wire = Wire()
    cfg = ProxyConfig(endpoints=tuple(REAL_ENDPOINTS[:2]),
                      gateway=GatewayConfig(piece_tokens=8, profile="cpu"))
    async with RoutingProxy(cfg, transport=wire) as p:
        await p.start()
        svc = p.service
        assert svc is not None
        moves: list[Any] = []

        def every_seam(session_id: Hashable, span: PieceSpan) -> None:
            if svc.gateway.moves.move(session_id, 1 - span.replica):
                moves.append(session_id)

        svc.on_piece = every_seam
        yield p, wire, moves


def openai_kw(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the ``openai`` client takes it (vLLM's own fields in ``extra_body``)."""
    kw = dict(body)
    kw["extra_body"] = {"return_token_ids": kw.pop("return_token_ids")}
    return kw


async def direct(path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.post(REAL_ENDPOINTS[0] + path, json=body) as r:
        assert r.status == 200, await r.text()
        out: dict[str, Any] = await r.json()
        return out


def of_chat(choice: Any) -> EngineOutput:
    content = choice["logprobs"]["content"]
    return EngineOutput(tuple(choice["token_ids"]), tuple(c["token"] for c in content),
                        tuple(c["logprob"] for c in content),
                        tuple({t["token"]: t["logprob"] for t in c["top_logprobs"]}
                              for c in content))


async def test_completions_through_moves_match_one_go(
        proxy: tuple[RoutingProxy, Wire, list[Any]]) -> None:
    p, wire, moves = proxy
    body = {"model": REAL_MODEL, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0.0,
            "logprobs": TOP_K, "return_token_ids": True}
    ref = await direct("/v1/completions", body)
    c = AsyncOpenAI(base_url=p.url + "/v1", api_key="none", max_retries=0)
    raw = await c.completions.with_raw_response.create(**openai_kw(body))
    raw.parse()  # the client reads it
    out = raw.http_response.json()
    ch = out["choices"][0]
    prompt = ref["choices"][0]["prompt_token_ids"]
    n = check_chain(wire.pieces(), prompt, ch["token_ids"], ch["text"],
                    ch["logprobs"]["token_logprobs"])
    assert n == -(-len(ch["token_ids"]) // 8) and len(moves) == n - 1
    check_logprobs_close(EngineOutput.of_completion(ch),
                         EngineOutput.of_completion(ref["choices"][0]), "proxy", "one go")
    assert set(out) == set(ref) and set(ch) == set(ref["choices"][0])
    assert set(out["usage"]) == set(ref["usage"])
    assert ch["finish_reason"] == ref["choices"][0]["finish_reason"] or ch["token_ids"] != \
        ref["choices"][0]["token_ids"]


async def test_chat_through_moves_matches_the_server_s_chat(
        proxy: tuple[RoutingProxy, Wire, list[Any]]) -> None:
    p, wire, moves = proxy
    body = {"model": REAL_MODEL, "messages": MSGS, "max_tokens": MAX_TOKENS,
            "temperature": 0.0, "logprobs": True, "top_logprobs": TOP_K,
            "return_token_ids": True}
    ref = await direct("/v1/chat/completions", body)
    c = AsyncOpenAI(base_url=p.url + "/v1", api_key="none", max_retries=0)
    raw = await c.chat.completions.with_raw_response.create(**openai_kw(body))
    raw.parse()
    out = raw.http_response.json()
    ch = out["choices"][0]
    assert out["prompt_token_ids"] == ref["prompt_token_ids"]  # the same template, as ids
    check_chain(wire.pieces(), ref["prompt_token_ids"], ch["token_ids"],
                ch["message"]["content"], [e["logprob"] for e in ch["logprobs"]["content"]])
    assert moves
    close = check_logprobs_close(of_chat(ch), of_chat(ref["choices"][0]), "proxy", "one go")
    if close.divergence is None and len(ch["token_ids"]) == len(ref["choices"][0]["token_ids"]):
        assert ch["message"]["content"] == ref["choices"][0]["message"]["content"]
    assert set(out) == set(ref) and set(ch) == set(ref["choices"][0])
    assert set(ch["message"]) == set(ref["choices"][0]["message"])


async def test_sglang_generate_and_streams_over_vllm_servers(
        proxy: tuple[RoutingProxy, Wire, list[Any]]) -> None:
    p, wire, _ = proxy
    ref = await direct("/v1/completions", {
        "model": REAL_MODEL, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0.0,
        "logprobs": TOP_K, "return_token_ids": True})
    prompt = ref["choices"][0]["prompt_token_ids"]
    async with aiohttp.ClientSession() as s:
        async with s.post(p.url + "/generate", headers={"X-SMG-Routing-Key": "s1"}, json={
                "input_ids": prompt, "return_logprob": True, "return_text_in_logprobs": True,
                "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0.0}}) as r:
            assert r.status == 200, await r.text()
            gen = await r.json()
        lps = gen["meta_info"]["output_token_logprobs"]
        check_chain(wire.pieces(), prompt, gen["output_ids"], gen["text"], [e[0] for e in lps])
        # SGLang's API gives no alternatives: the half of vLLM's comparison that needs none
        ids, got_lps = gen["output_ids"], [e[0] for e in lps]
        want = EngineOutput.of_completion(ref["choices"][0])
        div = next((i for i, (a, b) in enumerate(zip(ids, want.token_ids, strict=False))
                    if a != b), None)
        common = min(len(ids), len(want.token_ids)) if div is None else div
        assert all(abs(got_lps[i] - want.logprobs[i]) <= LOGPROB_ATOL for i in range(common))
        if div is not None:
            assert lps[div][2] in want.top[div]  # a near-tie, not a wrong token
        text = ""
        async with s.post(p.url + "/v1/completions", json={
                "model": REAL_MODEL, "prompt": PROMPT, "max_tokens": MAX_TOKENS,
                "temperature": 0.0, "stream": True, "stop": [" the"]}) as r:
            async for line in r.content:
                if line.startswith(b"data: {"):
                    text += json.loads(line[6:])["choices"][0]["text"]
        assert " the" not in text


async def test_a_stream_moved_mid_stream_matches_one_go(
        proxy: tuple[RoutingProxy, Wire, list[Any]]) -> None:
    """Streamed, the turn runs as one streamed piece, relayed chunk by chunk; moved after 10
    chunks it continues on the other server from the last token sent: the chunks join into
    the pieces' chain, with one finish, close to the same request in one go."""
    p, wire, _ = proxy
    gw = p.gateway
    assert gw is not None
    body = {"model": REAL_MODEL, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0.0,
            "logprobs": TOP_K, "return_token_ids": True}
    ref = await direct("/v1/completions", body)
    ids: list[int] = []
    text, lps, finishes, n = "", [], [], 0
    async with aiohttp.ClientSession() as s, s.post(p.url + "/v1/completions",
                                                    json={**body, "stream": True}) as r:
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            ch = json.loads(line[6:])["choices"][0]
            ids += ch["token_ids"] or []
            text += ch["text"]
            lps += (ch["logprobs"] or {}).get("token_logprobs") or []
            finishes += [ch["finish_reason"]] if ch["finish_reason"] else []
            n += 1
            if n == 10:
                (sid,) = gw._turns
                assert gw.moves.move(sid, 1 - gw._turns[sid].replica)
    prompt = ref["choices"][0]["prompt_token_ids"]
    assert check_chain(wire.streamed_pieces(), prompt, ids, text, None) == 2
    assert len(finishes) == 1 and len(lps) == len(ids) and n > len(ids) // 2
    want = EngineOutput.of_completion(ref["choices"][0])
    div = next((i for i, (a, b) in enumerate(zip(ids, want.token_ids, strict=False)) if a != b),
               None)
    common = min(len(ids), len(want.token_ids)) if div is None else div
    assert all(abs(lps[i] - want.logprobs[i]) <= LOGPROB_ATOL for i in range(common))
