"""One sample of a request: what the client receives, as a view over the turn's chain.

The gateway joins a turn's pieces into its ``TurnResult`` (token ids, text, logprobs, finish
reason; cut at a stop string that spans a seam), and hands back the chain it joined
(``TurnResult.chain``, each piece with what its server said beyond the tokens: each token's
text and top logprobs, the stop reason; ``runtime.execution.chain.Piece``). ``SampleOutput`` is the
sample as delivered: the join, with the per-token detail read off the chain's pieces and cut
where the join was cut. ``SampleTrace`` keeps a sample's pieces as they end only for a sample
aborted before its end (no ``TurnResult``): the same view over the pieces it had.
``LiveTokens`` keeps the tokens as they stream in (the gateway's ``on_tokens``), flat, for a
streamed answer to send from.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tailsieve.runtime.engine.pieces import PieceOutput, TokenDelta
from tailsieve.runtime.engine.streamed import extend_or_none
from tailsieve.runtime.execution.chain import Piece, ResponseChain
from tailsieve.runtime.execution.result import PieceSpan, TurnResult


@dataclass(slots=True)
class LiveTokens:
    """A sample's tokens as they came, in order (``grow``). Each list is None once a delta
    came without it. A delta that does not continue the last (the turn started again) stops
    it: ``broken``, nothing more is sent before the end."""

    ids: list[int] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)  # the text of each delta
    part_starts: list[int] = field(default_factory=list)  # where each part starts
    num_chars: int = 0
    starts: list[int] | None = field(default_factory=list)  # each token's first character
    lps: list[float] | None = field(default_factory=list)
    strs: list[str] | None = field(default_factory=list)  # each token's text
    tops: list[Any] | None = field(default_factory=list)  # each token's alternatives
    broken: bool = False
    cuts: deque[tuple[int, int]] = field(default_factory=deque)  # (tokens, characters) after
    # each delta not yet relayed: a stream sends one chunk per delta, as the server did

    def grow(self, start: int, d: TokenDelta) -> bool:
        """Take the tokens ``start ..`` (False: they do not continue what came)."""
        if self.broken or start != len(self.ids):
            self.broken = True
            return False
        n = len(d.token_ids)
        offs = d.text_offsets if d.text_offsets is not None and len(d.text_offsets) == n \
            else None
        if n:
            strs: Sequence[str] | None = d.token_texts
            if strs is None and offs is not None:
                strs = token_texts(d.text, offs)
            self.starts = extend_or_none(self.starts, None if offs is None else
                                  [self.num_chars + o for o in offs], n)
            self.lps = extend_or_none(self.lps, d.logprobs, n)
            self.strs = extend_or_none(self.strs, strs, n)
            self.tops = extend_or_none(self.tops, d.top_logprobs, n)
        self.ids.extend(d.token_ids)
        if d.text:
            self.parts.append(d.text)
            self.part_starts.append(self.num_chars)
            self.num_chars += len(d.text)
        self.cuts.append((len(self.ids), self.num_chars))
        return True

    @property
    def num_tokens(self) -> int:
        return len(self.ids)

    def text_since(self, chars: int) -> str:
        """The text from character ``chars`` on."""
        k = bisect.bisect_right(self.part_starts, chars) - 1
        if k < 0:
            return "".join(self.parts)
        return self.parts[k][chars - self.part_starts[k]:] + "".join(self.parts[k + 1:])


@dataclass(frozen=True, slots=True)
class SampleOutput:
    """One delivered sample."""

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
class SampleTrace:
    """The pieces of one sample that ended so far (a piece that starts before the end of the
    earlier ones replaces them: the turn was started again)."""

    prompt_ids: tuple[int, ...]
    pieces: list[Piece] = field(default_factory=list)
    spans: list[PieceSpan] = field(default_factory=list)

    def add(self, span: PieceSpan, out: PieceOutput) -> None:
        while self.spans and self.spans[-1].start >= span.start:
            self.spans.pop()
            self.pieces.pop()
        self.spans.append(span)
        self.pieces.append(out.piece(span.replica))

    def keep_streamed(self, live: LiveTokens) -> None:
        """A sample ended early (aborted): the tokens it streamed past its last piece are
        kept as a piece of their own (the running piece's, cut where it was)."""
        a, n = self.num_tokens, live.num_tokens
        if live.broken or n <= a or live.ids[:a] != self.token_ids():
            return
        base = sum(len(p.text) for p in self.pieces)
        offs = tuple(s - base for s in live.starts[a:]) if live.starts is not None else None
        out = PieceOutput(tuple(live.ids[a:]), "abort", live.text_since(base),
                          tuple(live.lps[a:]) if live.lps is not None else None, offs,
                          token_texts=tuple(live.strs[a:]) if live.strs is not None else None,
                          top_logprobs=tuple(live.tops[a:]) if live.tops is not None else None)
        self.add(PieceSpan(self.spans[-1].replica if self.spans else -1, a, n), out)

    @property
    def num_tokens(self) -> int:
        return self.spans[-1].end if self.spans else 0

    def token_ids(self) -> list[int]:
        return [t for p in self.pieces for t in p.token_ids]

    def output(self, index: int, result: TurnResult | None,
               stop: tuple[str, ...], want_logprobs: bool, latency_s: float) -> SampleOutput:
        """The sample as delivered: ``result`` (the gateway's join) over its chain, or, for a
        sample that was aborted (``result`` None), the join of the pieces that ended before
        the abort."""
        if result is None:
            chain: Sequence[Piece] = self.pieces
            joined = ResponseChain(max_tokens=0, pieces=list(chain)).join()
            ids, text, reason = joined.token_ids or (), joined.text, "abort"
            lps = joined.logprobs if chain else ()
            cached = self.spans[0].num_cached_tokens if self.spans else None
            stop_reason, spans = None, self.spans
        else:
            chain, spans = result.chain, list(result.pieces)
            ids, text, reason = result.token_ids, result.text or "", result.finish_reason
            lps, cached = result.logprobs, result.num_cached_tokens
            stop_reason = _stop_reason(chain, result, stop)
        n = len(ids)
        strs = _per_token(chain, "token_texts") if want_logprobs else None
        tops = _per_token(chain, "top_logprobs") if want_logprobs else None
        return SampleOutput(
            index=index, prompt_ids=self.prompt_ids, token_ids=ids,
            text=text, finish_reason=reason, stop_reason=stop_reason,
            logprobs=tuple(lps[:n]) if want_logprobs and lps is not None else None,
            token_strs=tuple(strs[:n]) if strs is not None and len(strs) >= n else None,
            tops=tuple(tops[:n]) if tops is not None and len(tops) >= n else None,
            cached_tokens=cached, replicas=tuple(s.replica for s in spans),
            latency_s=latency_s,
        )


def _per_token(chain: Sequence[Piece], name: str) -> list[Any] | None:
    """Each token's ``name`` of its piece (``token_texts``: where the server gave none, cut
    from the text at its offsets); None when a piece with tokens has none."""
    out: list[Any] = []
    for p in chain:
        n, offs = len(p.token_ids), p.text_offsets
        got = getattr(p, name)
        if (got is None or len(got) != n) and name == "token_texts" and n and offs is not None \
                and len(offs) == n:
            got = token_texts(p.text, offs)
        if got is None or len(got) != n:
            if n:
                return None
            continue
        out.extend(got)
    return out


def token_texts(text: str, offs: Sequence[int]) -> list[str]:
    """Each token's text, cut from ``text`` at its tokens' offsets (counted from the first)."""
    first = offs[0] if offs else 0
    ends = [*offs[1:], first + len(text)]
    return [text[a - first:b - first] for a, b in zip(offs, ends, strict=True)]


def _stop_reason(chain: Sequence[Piece], result: TurnResult,
                 stop: tuple[str, ...]) -> int | str | None:
    if result.finish_reason != "stop":
        return None
    joined = "".join(p.text for p in chain)
    cut = len(result.text or "")
    if len(result.token_ids) < sum(len(p.token_ids) for p in chain) or len(joined) > cut:
        for s in stop:  # a stop string across a seam: the chain cut the text before it
            if joined.startswith(s, cut):
                return s
    return chain[-1].stop_reason if chain else None
