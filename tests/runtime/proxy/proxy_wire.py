"""What the proxy sent to its servers and what they answered, and the chain check on it."""

from __future__ import annotations

from typing import Any

from tailsieve.runtime.backends import Backend
from tailsieve.runtime.lean_http import LeanTransport
from tailsieve.runtime.transport import JSON

Piece = tuple[list[int], list[int], str, list[float]]  # prompt ids, token ids, text, logprobs


class Wire(LeanTransport):
    """Records (url, payload, answer) of every generation POST."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, JSON, Any]] = []

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
                out.append((list(payload["prompt"]), list(ch["token_ids"]), ch["text"], lps))
        return out


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
