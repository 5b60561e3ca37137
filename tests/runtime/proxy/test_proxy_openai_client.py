"""The unchanged ``openai`` client against the proxy over stub replicas: completions and chat,
whole and streamed, ``n > 1``, logprobs; every answer token-exact against the same request
generated in one go, while the proxy moves each sample to the other replica after every
piece."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from openai import AsyncOpenAI
from proxy_stub import STUB_MODEL, char_ids, expected, long_prompt, stub_logprob, stub_text

from tailsieve.runtime.execution.result import PieceSpan
from tailsieve.runtime.proxy import RoutingProxy

PROMPT = "Tell me a story about a lighthouse."


def move_every_piece(proxy: RoutingProxy) -> list[tuple[Hashable, int]]:
    """Move each running turn to the other replica at every seam; returns the moves made."""
    made: list[tuple[Hashable, int]] = []
    svc = proxy.service
    assert svc is not None

    def hook(session_id: Hashable, span: PieceSpan) -> None:
        dst = 1 - span.replica
        if svc.gateway.moves.move(session_id, dst):
            made.append((session_id, dst))

    svc.on_piece = hook
    return made


def client(proxy: RoutingProxy) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
async def test_completions_are_exact_through_moves(proxy: RoutingProxy, stream: bool) -> None:
    moves = move_every_piece(proxy)
    want, reason = expected(char_ids(PROMPT), 60)
    c = client(proxy)
    if stream:
        text, fin, lps = "", None, []
        async for ch in await c.completions.create(model=STUB_MODEL, prompt=PROMPT,
                                                   max_tokens=60, logprobs=0, stream=True):
            text += ch.choices[0].text
            fin = ch.choices[0].finish_reason or fin
            if ch.choices[0].logprobs is not None:
                lps += ch.choices[0].logprobs.token_logprobs
    else:
        out = await c.completions.create(model=STUB_MODEL, prompt=PROMPT, max_tokens=60,
                                         logprobs=0)
        text, fin = out.choices[0].text, out.choices[0].finish_reason
        assert out.choices[0].logprobs is not None
        lps = list(out.choices[0].logprobs.token_logprobs)
        assert out.usage is not None
        assert out.usage.completion_tokens == len(want)
        assert out.usage.prompt_tokens == len(PROMPT)
    assert text == stub_text(want)
    assert fin == reason
    assert lps == pytest.approx([stub_logprob(t) for t in want])
    assert len(want) > 16 and len(moves) == (len(want) - 1) // 8  # one at every seam


async def test_n_samples_each_exact_and_different(proxy: RoutingProxy) -> None:
    move_every_piece(proxy)
    c = client(proxy)
    out = await c.completions.create(model=STUB_MODEL, prompt=[char_ids(PROMPT)],
                                     max_tokens=30, n=3, seed=5,
                                     extra_body={"return_token_ids": True})
    assert [ch.index for ch in out.choices] == [0, 1, 2]
    for ch in out.choices:
        ids = ch.model_extra["token_ids"]
        want, reason = expected(char_ids(PROMPT), 30)
        assert ids == want and ch.finish_reason == reason  # the stub ignores seeds
        assert ch.text == stub_text(ids)


async def test_chat_is_the_completion_of_the_templated_prompt(proxy: RoutingProxy) -> None:
    move_every_piece(proxy)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}]
    templ = char_ids("<system>Be brief.<user>" + PROMPT + "<assistant>")
    want, reason = expected(templ, 40)
    c = client(proxy)
    out = await c.chat.completions.create(model=STUB_MODEL, messages=msgs,  # type: ignore[arg-type]
                                          max_tokens=40, logprobs=True, top_logprobs=0)
    ch = out.choices[0]
    assert ch.message.content == stub_text(want)
    assert ch.finish_reason == reason
    assert ch.logprobs is not None and ch.logprobs.content is not None
    assert [e.logprob for e in ch.logprobs.content] == pytest.approx(
        [stub_logprob(t) for t in want])
    assert [e.token for e in ch.logprobs.content] == [f"<{t}>" for t in want]
    text = ""
    async for chunk in await c.chat.completions.create(
            model=STUB_MODEL, messages=msgs, max_tokens=40, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True}):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        else:
            assert chunk.usage is not None and chunk.usage.completion_tokens == len(want)
    assert text == stub_text(want)


async def test_unknown_model_and_bad_values_are_clear_4xx(proxy: RoutingProxy) -> None:
    import openai

    c = client(proxy)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        await c.completions.create(model="nope", prompt="x", max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        await c.completions.create(model=STUB_MODEL, prompt="x", max_tokens=4, temperature=-1)
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        await c.completions.create(model=STUB_MODEL, prompt="x", max_tokens=0)
    with pytest.raises(openai.BadRequestError, match="response_format"):
        await c.chat.completions.create(
            model=STUB_MODEL, messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_object"})


@pytest.mark.parametrize("stream", [False, True])
async def test_a_stop_string_across_a_seam_cuts_the_answer_as_one_request_would(
        proxy: RoutingProxy, stream: bool) -> None:
    """The servers see a stop string only inside their own piece; one that spans a seam is
    found in the joined text: the text ends before it, the tokens at the one completing it
    (vLLM's semantics), and a stream never sent what comes after it."""
    move_every_piece(proxy)
    prompt = long_prompt("Count:", 40)
    want, _ = expected(prompt, 40)
    first = stub_text(want[:8])  # the first piece (8 tokens)
    stop = first[-2:] + f"<{want[8]}>"[:3]
    full = stub_text(want)
    assert full.find(stop) == len(first) - 2
    c = client(proxy)
    kw: dict[str, Any] = {"model": STUB_MODEL, "prompt": prompt, "max_tokens": 40,
                          "stop": [stop], "extra_body": {"return_token_ids": True}}
    if stream:
        text, ids, fin = "", [], None
        async for ch in await c.completions.create(**kw, stream=True):
            text += ch.choices[0].text
            ids += ch.choices[0].model_extra.get("token_ids") or []
            fin = ch.choices[0].finish_reason or fin
    else:
        out = await c.completions.create(**kw)
        text, fin = out.choices[0].text, out.choices[0].finish_reason
        ids = out.choices[0].model_extra["token_ids"]
        assert out.choices[0].model_extra["stop_reason"] == stop
    assert text == first[:-2] and ids == want[:9] and fin == "stop"
