"""OpenAI/vLLM response JSON for the emulator: whole answers, streamed chunks, usage.

Generated text is the filler token ``" tok"`` (``FILLER``, id ``FILLER_TOKEN_ID``) repeated, one
per token, so ``usage.completion_tokens`` and the streamed chunk count are exact. The request
side (``GenRequest``, parsing, prompt token ids) is ``emulator.protocol``; the handlers that
answer with these bodies are ``emulator.server``, and SGLang's ``emulator.sglang`` reuses the
filler constants.
"""

from __future__ import annotations

from typing import Any

from tailsieve.runtime.emulator.protocol import GenRequest

FILLER = " tok"  # the text of every generated token
FILLER_LOGPROB = -0.5  # log-probability reported for every generated token
FILLER_TOKEN_ID = 42  # token id reported for every generated token (return_token_ids)
SYSTEM_FINGERPRINT = "tailsieve-emulator"


def _completion_logprobs(start: int, count: int, k: int) -> dict[str, Any]:
    return {
        "text_offset": [len(FILLER) * (start + i) for i in range(count)],
        "token_logprobs": [FILLER_LOGPROB] * count,
        "tokens": [FILLER] * count,
        "top_logprobs": [{FILLER: FILLER_LOGPROB} if k else {} for _ in range(count)],
    }


def _chat_logprobs(count: int, k: int) -> dict[str, Any]:
    top = [{"token": FILLER, "logprob": FILLER_LOGPROB, "bytes": list(FILLER.encode())}][:k]
    item = {"token": FILLER, "logprob": FILLER_LOGPROB, "bytes": list(FILLER.encode())}
    return {"content": [{**item, "top_logprobs": top} for _ in range(count)]}


def choice(
    req: GenRequest,
    index: int,
    num_tokens: int,
    finish_reason: str,
    prompt_ids: list[int] | None = None,
) -> dict[str, Any]:
    """One entry of a non-streaming response's ``choices``."""
    text = FILLER * num_tokens
    ids = [FILLER_TOKEN_ID] * num_tokens if req.return_token_ids else None
    pids = prompt_ids if req.return_token_ids else None
    if req.kind == "chat":
        lp = None if req.logprobs is None else _chat_logprobs(num_tokens, req.logprobs)
        msg: dict[str, Any] = {
            "role": "assistant",
            "content": text,
            "tool_calls": [],
            "reasoning_content": None,
        }
        return {
            "index": index,
            "message": msg,
            "logprobs": lp,
            "finish_reason": finish_reason,
            "stop_reason": None,
            "token_ids": ids,
        }
    lp = None if req.logprobs is None else _completion_logprobs(0, num_tokens, req.logprobs)
    return {
        "index": index,
        "text": text,
        "logprobs": lp,
        "finish_reason": finish_reason,
        "stop_reason": None,
        "token_ids": ids,
        "prompt_logprobs": None,
        "prompt_token_ids": pids,
        "routed_experts": None,
    }


def usage(prompt_tokens: int, completion_tokens: int,
          cached_tokens: int | None = None) -> dict[str, Any]:
    """``cached_tokens``: prompt tokens found in the prefix cache, reported as vLLM does with
    ``--enable-prompt-tokens-details`` (None: the details are off)."""
    details = None if cached_tokens is None else {"cached_tokens": cached_tokens}
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": details,
        "completion_tokens_details": None,
    }


def response(
    req: GenRequest,
    rid: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    completion_tokens: int,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """The full non-streaming response body."""
    obj = "chat.completion" if req.kind == "chat" else "text_completion"
    top: dict[str, Any] = {}
    if req.kind == "chat" and req.return_token_ids:  # vLLM: once per request, not per choice
        top["prompt_token_ids"] = list(req.prompt_ids[0])
    return {
        **top,
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": usage(sum(req.prompt_tokens), completion_tokens, cached_tokens),
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def chunk(
    req: GenRequest,
    rid: str,
    created: int,
    model: str,
    index: int,
    start: int,
    count: int,
    finish_reason: str | None,
    first: bool = False,
) -> dict[str, Any]:
    """One streamed chunk carrying ``count`` tokens (tokens ``start..start+count-1``)."""
    text = FILLER * count
    if req.kind == "chat":
        delta: dict[str, Any] = {"content": text}
        if first:
            delta = {"role": "assistant", "content": text}
        lp = None if req.logprobs is None or not count else _chat_logprobs(count, req.logprobs)
        ch: dict[str, Any] = {
            "index": index,
            "delta": delta,
            "logprobs": lp,
            "finish_reason": finish_reason,
        }
        if req.return_token_ids:  # as vLLM's chat stream (checked on 0.32)
            ch["token_ids"] = [FILLER_TOKEN_ID] * count
        obj = "chat.completion.chunk"
    else:
        lp = (
            None
            if req.logprobs is None or not count
            else _completion_logprobs(start, count, req.logprobs)
        )
        ch = {
            "index": index,
            "text": text,
            "logprobs": lp,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        if req.return_token_ids:
            ch["token_ids"] = [FILLER_TOKEN_ID] * count
        obj = "text_completion"
    out = {"id": rid, "object": obj, "created": created, "model": model, "choices": [ch]}
    if req.kind == "chat" and first and index == 0 and req.return_token_ids:
        out["prompt_token_ids"] = list(req.prompt_ids[0])  # vLLM: once, in the first chunk
    return out


def usage_chunk(
    req: GenRequest, rid: str, created: int, model: str, completion_tokens: int,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """The final ``stream_options.include_usage`` chunk (empty ``choices``)."""
    obj = "chat.completion.chunk" if req.kind == "chat" else "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(sum(req.prompt_tokens), completion_tokens, cached_tokens),
    }
