"""The recorder against real vLLM CPU servers.

* tiny model (``TAILSIEVE_VLLM_ENDPOINTS``, served name ``TAILSIEVE_VLLM_MODEL``): the columns
  are filled from what vLLM returns, on both dialects, streamed and not;
* the real model (``TAILSIEVE_REAL_ENDPOINTS``, served name ``TAILSIEVE_REAL_MODEL``, default
  ``smollm2``: SmolLM2-135M-Instruct from ``scripts/setup_real_model.sh``): the chat template
  reaches vLLM and responses end on the model's own EOS.

The recorder seeds every request (its default). vLLM CPU 0.32 kills its engine when a seeded
request's prefill is split into chunks (see ``record.recorder``); these recordings stay far
below the 2,048-token prefill budget per engine step, so the test servers keep chunked prefill
on (a full recording runs with ``--no-enable-chunked-prefill``).
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from tailsieve.record.recorder import RecordConfig, Recording, record_rollouts
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.runtime.prompt_file import PromptSet, read_prompt_set

pytestmark = pytest.mark.vllm

TINY = [u for u in os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", "").split(",") if u]
TINY_MODEL = os.environ.get("TAILSIEVE_VLLM_MODEL") or None
REAL = [u for u in os.environ.get("TAILSIEVE_REAL_ENDPOINTS", "").split(",") if u]
REAL_MODEL = os.environ.get("TAILSIEVE_REAL_MODEL", "smollm2")
SMOLLM2_EOS = 2  # <|im_end|>


def _record(urls: list[str], pset: PromptSet, **kw: object) -> Recording:
    cfg = RecordConfig(request_timeout_s=600.0, **kw)  # type: ignore[arg-type]
    return asyncio.run(record_rollouts(urls, pset, cfg))


def _as_text(pset: PromptSet) -> PromptSet:
    """The same questions as plain text prompts (no chat template)."""
    out = []
    for p in pset.prompts:
        assert p.messages is not None
        out.append(PromptInput(p.prompt_id, text=p.messages[-1]["content"]))
    return PromptSet(tuple(out), pset.answers, pset.source)


def _check_columns(rec: Recording, max_tokens: int, num_urls: int, stream: bool) -> None:
    tr = rec.trace
    assert tr.token_ids is not None and tr.prompt_tokens is not None and tr.replica is not None
    assert all(len(ids) == n for ids, n in zip(tr.token_ids, tr.response_tokens, strict=True))
    assert int(tr.prompt_tokens.min()) > 0
    assert set(tr.finish_reason.tolist()) <= {"stop", "length"}
    cut = tr.finish_reason == "length"
    assert np.all(tr.response_tokens[cut] == max_tokens)
    assert np.all(tr.response_tokens[~cut] <= max_tokens)
    assert len(set(tr.replica.tolist())) == min(num_urls, tr.num_rows)
    if stream:
        assert tr.chunk_times_s is not None and tr.chunk_tokens is not None
        assert all(ts[-1] > 0 for ts in tr.chunk_times_s)
    else:
        assert tr.chunk_times_s is None


@pytest.mark.skipif(not TINY, reason="TAILSIEVE_VLLM_ENDPOINTS not set")
@pytest.mark.parametrize("stream", [False, True])
def test_tiny_model_both_dialects(stream: bool) -> None:
    pset = read_prompt_set("math").head(3)
    kw = {"group_size": 2, "num_epochs": 2, "max_tokens": 24, "model": TINY_MODEL,
          "stream": stream, "stream_interval": 4 if stream else None}
    chat = _record(TINY, pset, **kw)
    text = _record(TINY, _as_text(pset), backend="vllm", **kw)
    for rec in (chat, text):
        assert rec.trace.num_rows == 3 * 2 * 2
        _check_columns(rec, 24, len(TINY), stream)
        assert rec.info["server_versions"][0] not in ("", "unknown")
    # the chat template wraps every question: more prompt tokens than the bare text
    assert chat.trace.prompt_tokens is not None and text.trace.prompt_tokens is not None
    assert np.all(chat.trace.prompt_tokens > text.trace.prompt_tokens)


@pytest.mark.skipif(not REAL, reason="TAILSIEVE_REAL_ENDPOINTS not set (SmolLM2 servers)")
def test_real_model_natural_eos_and_chat_template() -> None:
    pset = read_prompt_set("math").head(4)
    rec = _record(REAL, pset, group_size=4, max_tokens=256, model=REAL_MODEL, stream=True,
                  stream_interval=16)
    tr = rec.trace
    assert tr.num_rows == 16 and tr.correct is not None
    _check_columns(rec, 256, len(REAL), stream=True)
    assert rec.info["run_seed"] is not None and rec.info["sibling_copies"]["num_copies"] == 0
    stops = np.flatnonzero(tr.finish_reason == "stop")
    assert stops.size > 0, "no response ended on its own within 256 tokens"
    assert tr.token_ids is not None
    assert all(tr.token_ids[i][-1] == SMOLLM2_EOS for i in stops)  # the model's own EOS
    lengths = set(tr.response_tokens.tolist())
    assert len(lengths) > 4  # natural lengths vary (nothing forced)
    # one prompt -> one tokenization: the same prompt_tokens for every sample of a prompt
    assert tr.prompt_tokens is not None
    for code in range(tr.num_prompts):
        assert len(set(tr.prompt_tokens[tr.prompt_codes == code].tolist())) == 1
    plain = _record(REAL, _as_text(pset).head(1), group_size=1, max_tokens=8, model=REAL_MODEL,
                    backend="vllm")
    assert plain.trace.prompt_tokens is not None
    # SmolLM2's template adds its system prompt and the role markers
    assert int(tr.prompt_tokens[0]) >= int(plain.trace.prompt_tokens[0]) + 20
