"""Answers in vLLM's OpenAI-compatible shapes (``vllm/entrypoints/openai/*/protocol.py``,
vLLM 0.32): completions and chat completions, whole or as server-sent-event chunks.

A token's text and alternatives come from the servers' own logprobs where they gave them; a
token whose text is unknown is written ``token_id:<id>`` (vLLM's
``return_tokens_as_token_ids`` form). Chat logprobs are built from the completions-style
alternatives the servers return for the token-id prompts the proxy sends (the first
``top_logprobs`` of them, as vLLM's chat endpoint takes them).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from tailsieve.runtime.proxy.request import Api, ProxyRequest
from tailsieve.runtime.proxy.sample import SampleOutput
from tailsieve.runtime.proxy.stream import Delta

JSON = dict[str, Any]


def response_id(req: ProxyRequest) -> str:
    prefix = "chatcmpl-" if req.api is Api.CHAT else "cmpl-"
    return prefix + (req.rid or uuid.uuid4().hex)


def _strs(token_ids: Sequence[int], strs: Sequence[str] | None) -> list[str]:
    return list(strs) if strs is not None else [f"token_id:{t}" for t in token_ids]


def _tops(strs: list[str], lps: Sequence[float], tops: Sequence[Any] | None) -> list[Any]:
    if tops is not None:
        return [t if isinstance(t, dict) or t is None else None for t in tops]
    return [{s: lp} for s, lp in zip(strs, lps, strict=True)]


def completion_logprobs(d: Delta | SampleOutput, char_start: int = 0) -> JSON | None:
    """``CompletionLogProbs`` of a delta or a whole sample (None without logprobs)."""
    if d.logprobs is None:
        return None
    strs = _strs(d.token_ids, d.token_strs)
    offsets, pos = [], char_start
    for s in strs:
        offsets.append(pos)
        pos += len(s)
    return {"text_offset": offsets, "token_logprobs": [max(x, -9999.0) for x in d.logprobs],
            "tokens": strs, "top_logprobs": _tops(strs, d.logprobs, d.tops)}


def chat_logprobs(d: Delta | SampleOutput, k: int) -> JSON | None:
    """``ChatCompletionLogProbs`` of a delta or a whole sample (None without logprobs)."""
    if d.logprobs is None:
        return None
    strs = _strs(d.token_ids, d.token_strs)
    content: list[JSON] = []
    for s, lp, top in zip(strs, d.logprobs, _tops(strs, d.logprobs, d.tops), strict=True):
        alts = list(top.items())[:k] if isinstance(top, dict) else []
        content.append({
            "token": s, "logprob": max(lp, -9999.0), "bytes": list(s.encode("utf-8", "replace")),
            "top_logprobs": [{"token": t, "logprob": max(float(v), -9999.0),
                              "bytes": list(t.encode("utf-8", "replace"))} for t, v in alts],
        })
    return {"content": content}


def usage(prompt_ids: Sequence[Sequence[int]], outputs: Sequence[SampleOutput],
          n: int) -> JSON:
    """vLLM's ``UsageInfo``: each prompt counted once, every sample's tokens; the prefix
    cache hit where the servers reported one (first sample of each prompt)."""
    prompt = sum(len(p) for p in prompt_ids)
    done = sum(len(o.token_ids) for o in outputs)
    cached = [o.cached_tokens for o in outputs if o.index % n == 0]
    details = ({"cached_tokens": sum(c or 0 for c in cached)}
               if cached and any(c is not None for c in cached) else None)
    return {"prompt_tokens": prompt, "total_tokens": prompt + done, "completion_tokens": done,
            "prompt_tokens_details": details, "completion_tokens_details": None}


def completion_response(req: ProxyRequest, model: str, outputs: Sequence[SampleOutput],
                        prompt_ids: Sequence[Sequence[int]]) -> JSON:
    """The whole ``/v1/completions`` answer."""
    choices = [{
        "index": o.index, "text": o.text, "logprobs": completion_logprobs(o),
        "finish_reason": o.finish_reason, "stop_reason": o.stop_reason,
        "token_ids": list(o.token_ids) if req.return_token_ids else None,
        "prompt_logprobs": None,
        "prompt_token_ids": list(o.prompt_ids) if req.return_token_ids else None,
        "routed_experts": None,
    } for o in outputs]
    return {"id": response_id(req), "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "service_tier": None,
            "system_fingerprint": None, "usage": usage(prompt_ids, outputs, req.n),
            "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}


def chat_response(req: ProxyRequest, model: str, outputs: Sequence[SampleOutput],
                  prompt_ids: Sequence[Sequence[int]]) -> JSON:
    """The whole ``/v1/chat/completions`` answer (the generated text as the message's
    content: the servers' tool-call and reasoning parsers are not applied)."""
    choices: list[JSON] = [{
        "index": o.index,
        "message": {"role": "assistant", "content": o.text, "refusal": None,
                    "annotations": None, "audio": None, "function_call": None,
                    "reasoning": None},  # vLLM drops an empty tool_calls (ChatMessage)
        "logprobs": chat_logprobs(o, req.logprobs or 0),
        "finish_reason": o.finish_reason, "stop_reason": o.stop_reason,
        "token_ids": list(o.token_ids) if req.return_token_ids else None,
        "routed_experts": None,
    } for o in outputs]
    return {"id": response_id(req), "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices, "service_tier": None,
            "system_fingerprint": None, "usage": usage(prompt_ids, outputs, req.n),
            "prompt_logprobs": None,
            "prompt_token_ids": list(prompt_ids[0]) if req.return_token_ids else None,
            "prompt_text": None, "kv_transfer_params": None, "ec_transfer_params": None,
            "metrics": None}


class OpenAIStream:
    """The chunks of one streamed answer."""

    def __init__(self, req: ProxyRequest, model: str) -> None:
        self.req = req
        self.model = model
        self.id = response_id(req)
        self.created = int(time.time())
        self.chat = req.api is Api.CHAT
        self._started: set[int] = set()

    def _wrap(self, choice: JSON) -> JSON:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": [choice]}

    def opening(self, index: int, prompt_ids: Sequence[int]) -> list[JSON]:
        """Chat: the role chunk that opens each choice (vLLM sends it first)."""
        if not self.chat:
            return []
        ch: JSON = {"index": index, "delta": {"role": "assistant", "content": ""},
                    "logprobs": None, "finish_reason": None}
        if self.req.return_token_ids:
            ch["token_ids"] = []
        out = self._wrap(ch)
        if index == 0 and self.req.return_token_ids:
            out["prompt_token_ids"] = list(prompt_ids)
        return [out]

    def delta(self, index: int, d: Delta, prompt_ids: Sequence[int],
              finish: SampleOutput | None = None) -> JSON | None:
        """One chunk of choice ``index`` (None for an empty mid-stream delta)."""
        if not d.token_ids and not d.text and finish is None:
            return None
        reason = finish.finish_reason if finish is not None else None
        ids = list(d.token_ids) if self.req.return_token_ids else None
        if self.chat:
            ch: JSON = {"index": index, "delta": {"content": d.text},
                        "logprobs": chat_logprobs(d, self.req.logprobs or 0),
                        "finish_reason": reason}
            if finish is not None:
                ch["stop_reason"] = finish.stop_reason
            if ids is not None:
                ch["token_ids"] = ids
            return self._wrap(ch)
        first = index not in self._started
        self._started.add(index)
        return self._wrap({
            "index": index, "text": d.text, "logprobs": completion_logprobs(d, d.char_start),
            "finish_reason": reason,
            "stop_reason": finish.stop_reason if finish is not None else None,
            "prompt_token_ids": list(prompt_ids) if first and ids is not None else None,
            "token_ids": ids,
        })

    def usage(self, outputs: Sequence[SampleOutput],
              prompt_ids: Sequence[Sequence[int]]) -> JSON:
        """The final ``include_usage`` chunk (no choices; vLLM drops its null fields)."""
        u = {k: v for k, v in usage(prompt_ids, outputs, self.req.n).items() if v is not None}
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": [], "usage": u}
