"""The real model (SmolLM2-135M-Instruct, ``scripts/setup_real_model.sh``) loads and generates
on the real servers: its chat template answers in prose and ends on the model's own EOS, a
stop string ends a response where vLLM says, and logprobs come with their top-k alternatives.
Skips with the reason when the model could not be had."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from real_servers import REAL_ENDPOINTS, REAL_MODEL, REAL_MODEL_DIR, needs_real, skip_reason

pytestmark = pytest.mark.vllm
SMOLLM2_EOS = 2  # <|im_end|>


async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=600)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.post(REAL_ENDPOINTS[0] + path, json={"model": REAL_MODEL, **body}) as r,
    ):
        assert r.status == 200, await r.text()
        out: dict[str, Any] = await r.json()
        return out


@pytest.mark.skipif(skip_reason(0) is not None, reason=skip_reason(0) or "")
def test_the_converted_checkpoint_is_complete() -> None:
    if not REAL_MODEL_DIR.joinpath("config.json").is_file():
        pytest.skip(f"no real model at {REAL_MODEL_DIR} (run scripts/setup_real_model.sh)")
    for f in ("config.json", "model.safetensors", "tokenizer.json", "provenance.json"):
        assert REAL_MODEL_DIR.joinpath(f).is_file(), f
    cfg = json.loads(REAL_MODEL_DIR.joinpath("config.json").read_text())
    assert "quantization_config" not in cfg  # dequantized: a plain checkpoint vLLM serves


@needs_real(1)
async def test_chat_answers_in_prose_and_stops_on_its_own_eos() -> None:
    out = await post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "What is 17 + 25?"}], "max_tokens": 200,
        "temperature": 0, "return_token_ids": True})  # fmt: skip
    ch = out["choices"][0]
    assert ch["finish_reason"] == "stop" and ch["token_ids"][-1] == SMOLLM2_EOS
    text = ch["message"]["content"]
    assert len(text.split()) >= 3, text  # words, not noise


@needs_real(1)
async def test_stop_string_and_top_logprobs() -> None:
    body = {"prompt": "Here is a list of ten fruits:", "max_tokens": 40, "temperature": 0,
            "logprobs": 5, "return_token_ids": True}  # fmt: skip
    full = (await post("/v1/completions", body))["choices"][0]
    lp = full["logprobs"]
    for tok, x, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert x <= 0 and len(top) >= 5 and tok in top  # greedy: the argmax is among its top
        assert abs(top[tok] - x) < 1e-6 and x >= max(top.values()) - 1e-6
    word = full["text"].split()[2]
    cut = (await post("/v1/completions", {**body, "stop": [word]}))["choices"][0]
    assert cut["finish_reason"] == "stop" and word not in cut["text"]
    assert full["text"].startswith(cut["text"]) and len(cut["text"]) < len(full["text"])
