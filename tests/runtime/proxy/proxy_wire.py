"""What the proxy sent to its servers and what they answered, and the chain check on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.engine.lean_http import LeanTransport
from tailsieve.runtime.engine.transport import JSON

Piece = tuple[list[int], list[int], str, list[float]]  # prompt ids, token ids, text, logprobs


class Wire(LeanTransport):
    """Records (url, payload, answer) of every generation POST, and (url, payload, chunks) of
    every streamed one."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, JSON, Any]] = []
        self.streams: list[tuple[str, JSON, list[JSON]]] = []

    def stream_json(self, url: str, payload: JSON, timeout_s: float | None,
                    ) -> AsyncIterator[JSON]:
        got: list[JSON] = []
        self.streams.append((url, payload, got))
        return _recorded(super().stream_json(url, payload, timeout_s), got)

    def streamed_pieces(self, backend: Backend = Backend.VLLM) -> list[Piece]:
        """(prompt ids, token ids, text, logprobs) of each streamed piece, as far as it came
        (SGLang's chunks are cumulative; vLLM's are joined)."""
        out: list[Piece] = []
        for _, payload, chunks in self.streams:
            if backend is Backend.SGLANG:
                last = chunks[-1] if chunks else {"output_ids": [], "text": ""}
                out.append((list(payload["input_ids"]), list(last["output_ids"]),
                            last.get("text") or "", []))
                continue
            chs = [c for ch in chunks for c in ch.get("choices") or ()]
            out.append((list(payload["prompt"]), [t for c in chs for t in c["token_ids"]],
                        "".join(c["text"] for c in chs), []))
        return out

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        raw = await super().post_json(url, payload, timeout_s)
        if url.endswith(("/v1/completions", "/generate")):
            self.seen.append((url, payload, raw))
        return raw

    def pieces(self, backend: Backend = Backend.VLLM) -> list[Piece]:
        """(prompt ids, token ids, text, logprobs) of each piece, in order."""
        out = []
        for _, payload, raw in self.seen:
            if backend is Backend.SGLANG:
                meta = raw["meta_info"]
                lps = [e[0] for e in meta.get("output_token_logprobs") or []]
                out.append((list(payload["input_ids"]), list(raw["output_ids"]), raw["text"],
                            lps))
            else:
                ch = raw["choices"][0]
                lps = (ch["logprobs"] or {}).get("token_logprobs") or []
                out.append((_prompt_ids(payload["prompt"], ch), list(ch["token_ids"]),
                            ch["text"], lps))
        return out


def _prompt_ids(prompt: Any, choice: JSON) -> list[int]:
    """The ids a piece's server generated after: the ids sent, or for a prompt sent as text
    (the proxy's first piece) the ids the server echoed, which it must then have asked for."""
    if isinstance(prompt, str):
        echoed = choice.get("prompt_token_ids")
        assert echoed, "a text prompt was sent without asking the server to echo its ids"
        return list(echoed)
    return list(prompt)


async def _recorded(it: AsyncIterator[JSON], got: list[JSON]) -> AsyncIterator[JSON]:
    async for chunk in it:
        got.append(chunk)
        yield chunk


def check_chain(pieces: list[Piece], prompt: list[int], ids: list[int], text: str | None,
                lps: list[float] | None) -> int:
    """The answer is exactly the chain of the pieces whose prompts extend ``prompt`` (each
    continued piece's prompt is the prompt plus the tokens before it); returns their
    number."""
    mine = [p for p in pieces if p[0][:len(prompt)] == prompt]
    so_far: list[int] = []
    for p_ids, out_ids, _, _ in mine:
        assert p_ids == prompt + so_far
        so_far += out_ids
    assert ids == so_far
    if text is not None:
        assert text == "".join(p[2] for p in mine)
    if lps is not None:
        assert lps == [x for p in mine for x in p[3]]
    return len(mine)
