"""One sample of a request: its pieces as they end, and what the client receives.

The gateway joins a turn's pieces into its ``TurnResult`` (token ids, text, logprobs, finish
reason; cut at a stop string that spans a seam): that is the authority on what the client
gets. ``SampleTrace`` keeps the pieces as they end, with what the ``TurnResult`` does not
carry (each token's text and top logprobs as the server reported them, the server's
``stop_reason``), so that a streamed answer can be sent piece by piece and a final answer in
the servers' own shape. ``SampleOutput`` is the sample as delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailsieve.runtime.sessions.pieces import PieceOutput
from tailsieve.runtime.sessions.result import PieceSpan, TurnResult


@dataclass(frozen=True, slots=True)
class PieceDetail:
    """What a server said about a piece beyond its tokens (None where it said nothing)."""

    token_strs: tuple[str, ...] | None = None  # each token's text (vLLM ``logprobs.tokens``)
    tops: tuple[Any, ...] | None = None  # each token's alternatives (vLLM ``top_logprobs``)
    stop_reason: int | str | None = None  # the stop string / token id that ended it


@dataclass(frozen=True, slots=True)
class DetailedPieceOutput(PieceOutput):
    """A piece's output with its ``PieceDetail`` (``proxy.runner`` returns these)."""

    detail: PieceDetail | None = None


@dataclass(frozen=True, slots=True)
class SampleOutput:
    """One delivered sample."""

    prompt_index: int  # which prompt of the request
    index: int  # its index among the request's samples (prompt-major)
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None  # the stop string or token id (None: EOS / length)
    logprobs: tuple[float, ...] | None = None
    token_strs: tuple[str, ...] | None = None  # each token's text (when logprobs were asked)
    tops: tuple[Any, ...] | None = None  # each token's alternatives as the server gave them
    cached_tokens: int | None = None  # prompt tokens the first piece's server found cached
    replicas: tuple[int, ...] = ()  # where its pieces ran, in order
    latency_s: float = 0.0


@dataclass(slots=True)
class _Piece:
    span: PieceSpan
    out: PieceOutput


@dataclass(slots=True)
class SampleTrace:
    """The pieces of one sample so far (a piece that starts before the end of the earlier
    ones replaces them: the turn was started again)."""

    prompt_ids: tuple[int, ...]
    pieces: list[_Piece] = field(default_factory=list)

    def add(self, span: PieceSpan, out: PieceOutput) -> None:
        while self.pieces and self.pieces[-1].span.start >= span.start:
            self.pieces.pop()
        self.pieces.append(_Piece(span, out))

    @property
    def num_tokens(self) -> int:
        return self.pieces[-1].span.end if self.pieces else 0

    @property
    def text(self) -> str:
        return "".join(p.out.text or "" for p in self.pieces)

    def token_ids(self) -> list[int]:
        return [t for p in self.pieces for t in p.out.token_ids]

    def token_starts(self) -> list[int] | None:
        """Each token's first character in ``text`` (None: a piece came without offsets)."""
        out: list[int] = []
        base = 0
        for p in self.pieces:
            offs = p.out.text_offsets
            if offs is None or len(offs) != len(p.out.token_ids):
                if p.out.token_ids:
                    return None
            else:
                first = offs[0] if offs else 0
                out.extend(base + o - first for o in offs)
            base += len(p.out.text or "")
        return out

    def token_strs(self) -> list[str] | None:
        """Each token's text: the server's strings, else cut from the text at its offsets."""
        out: list[str] = []
        for p in self.pieces:
            d = getattr(p.out, "detail", None)
            if d is not None and d.token_strs is not None and \
                    len(d.token_strs) == len(p.out.token_ids):
                out.extend(d.token_strs)
                continue
            offs, text = p.out.text_offsets, p.out.text or ""
            if offs is None or len(offs) != len(p.out.token_ids):
                if p.out.token_ids:
                    return None
                continue
            first = offs[0] if offs else 0
            ends = [*offs[1:], first + len(text)]
            out.extend(text[a - first:b - first] for a, b in zip(offs, ends, strict=True))
        return out

    def tops(self) -> list[Any] | None:
        out: list[Any] = []
        for p in self.pieces:
            d = getattr(p.out, "detail", None)
            if d is None or d.tops is None or len(d.tops) != len(p.out.token_ids):
                if p.out.token_ids:
                    return None
                continue
            out.extend(d.tops)
        return out

    def logprobs(self) -> list[float] | None:
        out: list[float] = []
        for p in self.pieces:
            if p.out.logprobs is None:
                if p.out.token_ids:
                    return None
                continue
            out.extend(p.out.logprobs)
        return out

    def stop_reason(self) -> int | str | None:
        d = getattr(self.pieces[-1].out, "detail", None) if self.pieces else None
        return d.stop_reason if d is not None else None

    def output(self, prompt_index: int, index: int, result: TurnResult | None,
               stop: tuple[str, ...], want_logprobs: bool, latency_s: float) -> SampleOutput:
        """The sample as delivered: ``result`` (the gateway's join), or, for a sample that
        was aborted (``result`` None), the pieces that ended before the abort."""
        if result is None:
            ids = tuple(self.token_ids())
            text, reason, lps = self.text, "abort", self.logprobs()
            stop_reason = None
            cached = self.pieces[0].span.num_cached_tokens if self.pieces else None
        else:
            ids, text, reason = result.token_ids, result.text or "", result.finish_reason
            lps = list(result.logprobs) if result.logprobs is not None else None
            cached = result.num_cached_tokens
            stop_reason = self._stop_reason(result, stop)
        n = len(ids)
        strs = self.token_strs() if want_logprobs else None
        tops = self.tops() if want_logprobs else None
        return SampleOutput(
            prompt_index=prompt_index, index=index, prompt_ids=self.prompt_ids, token_ids=ids,
            text=text, finish_reason=reason, stop_reason=stop_reason,
            logprobs=tuple(lps[:n]) if want_logprobs and lps is not None else None,
            token_strs=tuple(strs[:n]) if strs is not None and len(strs) >= n else None,
            tops=tuple(tops[:n]) if tops is not None and len(tops) >= n else None,
            cached_tokens=cached, replicas=tuple(p.span.replica for p in self.pieces),
            latency_s=latency_s,
        )

    def _stop_reason(self, result: TurnResult, stop: tuple[str, ...]) -> int | str | None:
        if result.finish_reason != "stop":
            return None
        joined = self.text
        cut = len(result.text or "")
        if len(result.token_ids) < self.num_tokens or len(joined) > cut:
            for s in stop:  # a stop string across a seam: the chain cut the text before it
                if joined.startswith(s, cut):
                    return s
        return self.stop_reason()
