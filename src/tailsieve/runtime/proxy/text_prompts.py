"""Plain-text prompts sent to the servers as text (``ProxyConfig.text_prompts``; vLLM only).

A completions prompt given as plain text need not be tokenized by the proxy first: its server
tokenizes it as ``/tokenize`` would and echoes the ids with its answer. ``TextPrompts`` decides
which prompts may go so, and estimates such a prompt's length before its ids come back (its
characters over the characters per token learned from the prompts echoed so far). Used by
``service.ProxyService``.
"""

from __future__ import annotations

from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.engine.pieces import CHARS_PER_TOKEN, text_tokens
from tailsieve.runtime.proxy.request import Api, PromptSpec, ProxyRequest


class TextPrompts:
    """Which prompts go to the servers as text, and how long such a prompt is estimated to be
    before its ids come back: its characters over the characters per token of the text prompts
    echoed so far (``CHARS_PER_TOKEN`` before any)."""

    def __init__(self, on: bool, backend: Backend) -> None:
        self.on = on and backend is Backend.VLLM
        self.num_chars = 0
        self.num_tokens = 0

    def text_of(self, req: ProxyRequest, p: PromptSpec) -> str | None:
        """``p``'s text where the server's completions endpoint tokenizes it as ``/tokenize``
        would (plain text, special tokens added, answered whole), else None."""
        tok = p.tokenize
        if not self.on or req.api is not Api.COMPLETIONS or req.stream or tok is None:
            return None
        text = tok.get("prompt")
        if not isinstance(text, str) or not text or set(tok) - {"prompt", "add_special_tokens"}:
            return None
        return text if tok.get("add_special_tokens", True) is True else None

    def estimate(self, text: str) -> int:
        per = self.num_chars / self.num_tokens if self.num_tokens else CHARS_PER_TOKEN
        return text_tokens(text, per)

    def echoed(self, text: str, ids: tuple[int, ...]) -> None:
        self.num_chars += len(text)
        self.num_tokens += len(ids)
