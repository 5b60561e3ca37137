"""How many tokens an answer of a generation server says it generated, per sequence, and how
many prompt tokens it counted: vLLM's completions and chat answers (token ids, logprob entries
or ``usage``), SGLang's ``/generate`` (``meta_info``), streamed or not. Used to time requests
(``runtime.auto_profile``); never raises on an unexpected shape (None: not known)."""

from __future__ import annotations

from typing import Any

from tailsieve.runtime.transport import JSON


def answer_tokens(body: Any) -> tuple[tuple[int, ...] | None, int | None]:
    """Tokens each sequence of a non-streamed answer generated, and the prompt tokens the
    server counted (None where the answer does not say)."""
    if isinstance(body, list):  # SGLang, n > 1
        parts = [answer_tokens(b) for b in body]
        if not parts or any(t is None for t, _ in parts):
            return None, None
        return tuple(x for t, _ in parts for x in (t or ())), parts[0][1]
    if not isinstance(body, dict):
        return None, None
    meta = body.get("meta_info")
    if isinstance(meta, dict):  # SGLang
        c, p = meta.get("completion_tokens"), meta.get("prompt_tokens")
        return ((int(c),) if isinstance(c, int) else None), (p if isinstance(p, int) else None)
    usage = body.get("usage") or {}
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    prompt = prompt if isinstance(prompt, int) else None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return None, prompt
    counts = [choice_tokens(ch) for ch in choices]
    if all(c is not None for c in counts):
        return tuple(int(c) for c in counts if c is not None), prompt
    total = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(total, int):
        return None, prompt
    per = total / len(choices)
    return tuple(round(per) for _ in choices), prompt


def choice_tokens(ch: Any) -> int | None:
    if not isinstance(ch, dict):
        return None
    ids = ch.get("token_ids")
    if ids is not None:
        return len(ids)
    lp = ch.get("logprobs")
    if isinstance(lp, dict):
        toks = lp.get("tokens") or lp.get("content")
        if isinstance(toks, list):
            return len(toks)
    return None


class StreamCount:
    """Tokens per sequence of a streamed answer as its chunks arrive."""

    def __init__(self, n: int) -> None:
        self.counts = [0] * n
        self.usage: int | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None  # prefix-cache hits, where the server says

    def add(self, chunk: JSON) -> bool:
        """Count ``chunk``; True when it carried generated tokens."""
        got = False
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                self.usage = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                self.prompt_tokens = usage["prompt_tokens"]
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                self.cached_tokens = details["cached_tokens"]
        meta = chunk.get("meta_info")
        if isinstance(meta, dict):  # SGLang: cumulative counts
            c = meta.get("completion_tokens")
            if isinstance(c, int) and c > self.counts[0]:
                self.counts[0], got = c, True
            if isinstance(meta.get("prompt_tokens"), int):
                self.prompt_tokens = meta["prompt_tokens"]
            if isinstance(meta.get("cached_tokens"), int):
                self.cached_tokens = meta["cached_tokens"]
        for ch in chunk.get("choices") or ():
            i = ch.get("index", 0) if isinstance(ch, dict) else 0
            if not isinstance(i, int) or not 0 <= i < len(self.counts):
                continue
            n = choice_tokens(ch)
            if n is None:
                text = ch.get("text")
                if text is None:
                    text = (ch.get("delta") or {}).get("content")
                n = 1 if text else 0
            self.counts[i] += n
            got = got or n > 0
        return got

    def uncached(self) -> int | None:
        """Prompt tokens the server prefilled (None unless it reported its cache hits)."""
        if self.prompt_tokens is None or self.cached_tokens is None:
            return None
        return max(self.prompt_tokens - self.cached_tokens, 0)

    def tokens(self) -> tuple[int, ...] | None:
        if len(self.counts) == 1 and self.usage is not None:
            return (self.usage,)
        return tuple(self.counts) if any(self.counts) else None
