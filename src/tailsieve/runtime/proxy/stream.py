"""What a streamed sample may send so far, and the rest when it ends.

A sample's tokens arrive as the servers stream them (``LiveTokens``: each chunk of the running
piece, a moved turn's from the last token sent); its final output (``SampleOutput``) may be
shorter when a stop string spans a seam (the chain cuts the text before it and the tokens after
the one completing it). So while a sample runs, ``StreamCursor`` sends only what no later seam
can take back: with stop strings, all but the last ``longest stop - 1`` characters of text and
nothing from a stop string found in it (cut at a token's end; tokens without text offsets are
held to the end); without, every token as it came. At the end it sends the rest of the final
output, and checks that what was sent is a prefix of it. Each step costs what it sends (plus
the held text), not the sample so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailsieve.errors import TailSieveError
from tailsieve.runtime.proxy.sample import LiveTokens, SampleOutput


@dataclass(frozen=True, slots=True)
class Delta:
    """Tokens ``start .. start + len(token_ids) - 1`` of a sample, with their text."""

    start: int  # index of the first token in the sample's output
    char_start: int  # offset of ``text`` in the sample's text
    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[float, ...] | None = None
    token_strs: tuple[str, ...] | None = None
    tops: tuple[Any, ...] | None = None


@dataclass(slots=True)
class StreamCursor:
    """How much of one sample has been sent."""

    stop: tuple[str, ...] = ()
    want_logprobs: bool = False
    sent_ids: list[int] = field(default_factory=list)
    sent_text: list[str] = field(default_factory=list)
    sent_chars: int = 0

    @property
    def hold_chars(self) -> int:
        return max((len(s) for s in self.stop), default=1) - 1

    def progress(self, live: LiveTokens, cut: tuple[int, int] | None = None) -> Delta | None:
        """The part of ``live`` that is safe to send now (None: nothing new); ``cut``: of its
        first (tokens, characters) only (one delta at a time, as they came)."""
        if live.broken:
            return None
        n, num_chars = cut if cut is not None else (live.num_tokens, live.num_chars)
        a = len(self.sent_ids)
        unsent = live.text_since(self.sent_chars)[:max(num_chars - self.sent_chars, 0)]
        if not self.stop:
            safe_tok, safe_chars = n, num_chars
        else:
            starts = live.starts
            if starts is None:
                return None
            limit = num_chars - self.hold_chars
            for stop in self.stop:  # one complete in the unsent text: the chain ends there
                at = unsent.find(stop)
                if at >= 0:
                    limit = min(limit, self.sent_chars + at)
            safe_tok = a
            while safe_tok < n and (starts[safe_tok + 1] if safe_tok + 1 < n
                                    else num_chars) <= limit:
                safe_tok += 1
            safe_chars = ((starts[safe_tok] if safe_tok < n else num_chars)
                          if safe_tok > a else self.sent_chars)
        if safe_tok <= a:
            return None
        lps, strs, tops = (live.lps, live.strs, live.tops) if self.want_logprobs else \
            (None, None, None)
        return self._send(Delta(
            a, self.sent_chars, tuple(live.ids[a:safe_tok]),
            unsent[:safe_chars - self.sent_chars],
            tuple(lps[a:safe_tok]) if lps is not None else None,
            tuple(strs[a:safe_tok]) if strs is not None else None,
            tuple(tops[a:safe_tok]) if tops is not None else None))

    def finish(self, out: SampleOutput) -> Delta:
        """The rest of ``out`` (possibly empty); raises ``TailSieveError`` if what was sent
        is not a prefix of it."""
        a = len(self.sent_ids)
        if list(out.token_ids[:a]) != self.sent_ids or \
                not out.text.startswith("".join(self.sent_text)):
            raise TailSieveError("a streamed sample's final output does not extend what was "
                                 "already sent")
        return self._send(Delta(
            a, self.sent_chars, out.token_ids[a:], out.text[self.sent_chars:],
            out.logprobs[a:] if out.logprobs is not None else None,
            out.token_strs[a:] if out.token_strs is not None else None,
            out.tops[a:] if out.tops is not None else None))

    def _send(self, d: Delta) -> Delta:
        self.sent_ids.extend(d.token_ids)
        self.sent_text.append(d.text)
        self.sent_chars += len(d.text)
        return d
