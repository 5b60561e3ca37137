"""A streamed piece as it arrives: vLLM's ``/v1/completions`` server-sent events gathered into
one ``PieceOutput``, readable at any moment (a move that closes the stream keeps what came).

Each chunk carries the piece's next token ids (``return_token_ids``), their text, and their
logprobs (each token's text and alternatives) when asked; the last choice chunk its finish
reason and stop reason, the usage chunk (``stream_options.include_usage``) the prompt tokens
the server found cached (``--enable-prompt-tokens-details``).
A token's text offset is known where it came in a chunk of its own (every token streamed, the
default ``stream_interval``), else from the chunk's logprobs. SGLang's streamed ``/generate``
(``sglang=True``) sends the output so far in each chunk (token ids and text cumulative; with
``--incremental-streaming-output``, each chunk's own): what is new is taken. A request with
several responses (``n``) is read as one ``StreamedPiece`` per response (``index``). Each chunk's
arrival and the tokens so far are kept (``PieceOutput.chunk_times_s``, ``chunk_tokens``); a
choice streamed without token ids (``return_token_ids`` off) counts a token per chunk, or the server's ``usage`` count where the request had one response.

A piece with a ``TokenSink`` hands each chunk's new tokens to it as they come (``TokenDelta``):
what a streamed answer relays, while the piece itself still ends as one ``PieceOutput``.

A streamed piece is ended (``stop_at_boundary``) only where its text is whole: the servers hold
back the text of a token that ends inside a multi-byte character (vLLM's and SGLang's
detokenizers send it with the token that completes the character), and a piece continued from
inside a character comes back with the wrong text (vLLM 0.32 answers the decoded prompt with
it). So the piece ends after its last token that came with text, at once if that is the last
token so far, else at the next one; what comes after is not taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailsieve.runtime.engine.faults import (
    ReplicaDownError,
    RequestError,
    check_finished,
    engine_abort,
)
from tailsieve.runtime.engine.pieces import PieceOutput, TokenDelta, TokenSink, piece_reason
from tailsieve.runtime.engine.transport import JSON
from tailsieve.runtime.engine.wire_bodies import matched_stop, stop_value, token_detail


@dataclass(slots=True)
class StreamedPiece:
    """What a streamed piece has delivered so far (``sink``: told of each chunk's tokens)."""

    ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # text offset of each token, where known
    token_texts: list[str] | None = field(default_factory=list)  # each token's text and
    tops: list[Any] | None = field(default_factory=list)  # alternatives, as the server gave
    # them (None once a chunk with tokens came without them)
    stop_reason: int | str | None = None  # the stop string or token id that ended it
    num_chars: int = 0
    reason: str = ""  # the finish reason, once it came
    cached_tokens: int | None = None
    prompt_tokens: int | None = None  # as the server counted them (``usage``, ``meta_info``)
    prompt_ids: tuple[int, ...] | None = None  # the prompt's ids, where the server echoed them
    sink: TokenSink | None = None
    sglang: bool = False  # chunks are SGLang's ``/generate`` outputs
    index: int = 0  # the response of the request read here (the others' choices are skipped)
    t0_s: float = field(default_factory=time.perf_counter)  # when the request was sent
    # (the loop clock may tick in ms (uvloop): too coarse for chunk times)
    times_s: list[float] = field(default_factory=list)  # arrival of each chunk, s after t0_s
    marks: list[int] = field(default_factory=list)  # tokens so far after each chunk
    num_unseen: int = 0  # tokens streamed without their ids (one per chunk with text)
    usage_tokens: int | None = None  # generated tokens of the whole request (``usage``)
    num_samples: int = 1  # responses of the request (more than one: ``usage`` counts them all)
    at_boundary: bool = True  # the tokens so far end where their text is whole
    closed: bool = False  # ended (``stop_at_boundary``): later chunks are not taken
    _on_boundary: Callable[[], object] | None = None

    def add(self, chunk: JSON, where: str) -> None:
        """Take one chunk (a malformed one is a ``RequestError``; one after the piece was
        ended is dropped)."""
        if self.closed:
            return
        try:
            if self.sglang:
                engine_abort(where, (chunk.get("meta_info") or {}).get("finish_reason"))
                self._add_sglang(chunk)
            else:
                self._add(chunk)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise RequestError(f"{where}: unexpected stream chunk ({exc!r})") from exc

    def stop_at_boundary(self, stop: Callable[[], object]) -> None:
        """End the piece where its text is whole (see the module docstring): ``stop`` is
        called then (at once when the tokens so far end there)."""
        if self.closed:
            return
        if self.at_boundary:
            self.closed = True
            stop()
        else:
            self._on_boundary = stop

    def take(self, d: TokenDelta, whole: bool | None = None) -> None:
        """Append a delta's tokens (and tell the sink); ``whole``: they end where the text is
        whole (None: when the delta came with text)."""
        if self.closed:
            return
        n = len(d.token_ids)
        if d.text_offsets is not None and len(d.text_offsets) == n:
            self.offsets.extend(self.num_chars + o for o in d.text_offsets)
        if d.logprobs is not None:
            self.logprobs.extend(d.logprobs)
        if n:
            self.token_texts = extend_or_none(self.token_texts, d.token_texts, n)
            self.tops = extend_or_none(self.tops, d.top_logprobs, n)
        self.ids.extend(d.token_ids)
        self.texts.append(d.text)
        self.num_chars += len(d.text)
        if self.sink is not None and (d.token_ids or d.text):
            self.sink(d)
        if n:
            self.at_boundary = bool(d.text) if whole is None else whole
        if self.at_boundary and self._on_boundary is not None:
            self.closed = True
            self._on_boundary()

    def _add(self, chunk: JSON) -> None:
        usage = chunk.get("usage")
        if usage:
            details = usage.get("prompt_tokens_details") or {}
            got = details.get("cached_tokens")
            if isinstance(got, int) and not isinstance(got, bool):
                self.cached_tokens = got
            if isinstance(usage.get("completion_tokens"), int):
                self.usage_tokens = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                self.prompt_tokens = usage["prompt_tokens"]
        if self.prompt_ids is None and chunk.get("prompt_token_ids"):  # vLLM's chat chunks
            self.prompt_ids = tuple(int(t) for t in chunk["prompt_token_ids"])
        for ch in chunk.get("choices") or ():
            if int(ch.get("index", 0)) != self.index:
                continue
            if self.prompt_ids is None and ch.get("prompt_token_ids"):
                self.prompt_ids = tuple(int(t) for t in ch["prompt_token_ids"])
            delta = ch.get("delta")  # chat completions
            text = ch.get("text") or "" if delta is None else delta.get("content") or ""
            raw = ch.get("token_ids")
            if raw is None and (text or not (ch.get("finish_reason") or "role" in (delta or {}))):
                self.num_unseen += 1  # (a chat stream's first chunk only names the role)
            toks = tuple(int(t) for t in raw or ())
            lp = ch.get("logprobs") or {}
            vals = lp.get("token_logprobs") if isinstance(lp, dict) else None
            lps = tuple(float(v) for v in vals if v is not None) if vals else None
            offs = lp.get("text_offset") if isinstance(lp, dict) else None
            rel: tuple[int, ...] | None = None
            if len(toks) == 1:
                rel = (0,)
            elif offs and len(offs) == len(toks):
                rel = tuple(int(o) - int(offs[0]) for o in offs)
            self.take(TokenDelta(toks, text, lps, rel, self.index, *token_detail(lp)))
            if ch.get("finish_reason"):
                self.reason = str(ch["finish_reason"])
                self.stop_reason = stop_value(ch.get("stop_reason"))
            self._mark()

    def _mark(self) -> None:
        self.times_s.append(round(time.perf_counter() - self.t0_s, 6))
        self.marks.append(len(self.ids) + self.num_unseen)

    def _add_sglang(self, chunk: JSON) -> None:
        if int(chunk.get("index", 0)) != self.index:
            return
        meta = chunk.get("meta_info") or {}
        have = len(self.ids)
        ids = [int(t) for t in chunk.get("output_ids") or ()]
        total = meta.get("completion_tokens")
        whole = not isinstance(total, int) or len(ids) == total  # cumulative (the default)
        new = tuple(ids[have:] if whole else ids)
        text = chunk.get("text")
        known = isinstance(text, str)
        if not isinstance(text, str):
            text = ""  # SGLang >= 0.5 sends the text of a cumulative stream at its end only
        elif whole:
            text = text[self.num_chars:]
        lp = meta.get("output_token_logprobs")
        lps = None
        if isinstance(lp, list):
            vals = lp[have:] if whole and len(lp) == len(ids) else lp
            if len(vals) == len(new):
                lps = tuple(float(v[0]) for v in vals)
        self.take(TokenDelta(new, text, lps, (0,) if len(new) == 1 else None, self.index),
                  bool(text) or not known)
        cached = meta.get("cached_tokens")
        if isinstance(cached, int) and not isinstance(cached, bool):
            self.cached_tokens = cached
        if isinstance(meta.get("prompt_tokens"), int):
            self.prompt_tokens = meta["prompt_tokens"]
        fr = meta.get("finish_reason")
        if fr:
            self.reason = str(fr.get("type") if isinstance(fr, dict) else fr)
            self.stop_reason = matched_stop(fr)
        if not ids and isinstance(total, int):  # no ids streamed: the server's count
            self.num_unseen = total - len(self.ids)
        self._mark()

    def output(self, interrupted: bool = False) -> PieceOutput:
        """The piece as delivered: finish reason "abort" when it was interrupted before its
        end (the server's own reason read by ``piece_reason``)."""
        reason = "abort" if interrupted and not self.reason else piece_reason(self.reason)
        n = len(self.ids)
        marks = list(self.marks)
        unseen = 0 if n else self.num_unseen  # ids came: they are the count
        if unseen and self.usage_tokens is not None and not n and self.num_samples == 1:
            unseen = self.usage_tokens
            marks[-1:] = [unseen]
        return PieceOutput(
            token_ids=tuple(self.ids), finish_reason=reason, text="".join(self.texts),
            logprobs=tuple(self.logprobs) if self.logprobs and len(self.logprobs) == n else None,
            text_offsets=tuple(self.offsets) if len(self.offsets) == n else None,
            token_texts=_whole(self.token_texts, n), top_logprobs=_whole(self.tops, n),
            stop_reason=self.stop_reason,
            num_cached_tokens=self.cached_tokens, prompt_ids=self.prompt_ids,
            num_prompt_tokens=self.prompt_tokens,
            num_tokens=n + unseen if unseen else None,
            chunk_times_s=tuple(self.times_s),
            chunk_tokens=tuple(marks))


def extend_or_none(have: list[Any] | None, more: Any, n: int) -> list[Any] | None:
    """``have`` extended by ``more`` (None when either is missing or ``more`` is not n long)."""
    if have is None or more is None or len(more) != n:
        return None
    have.extend(more)
    return have


def _whole(got: list[Any] | None, n: int) -> tuple[Any, ...] | None:
    return tuple(got) if got is not None and len(got) == n else None


def finished(piece: StreamedPiece, where: str) -> None:
    """A stream that ended must have said why (else it was cut: a replica fault,
    ``runtime.engine.faults.check_finished``)."""
    check_finished(where, {0: piece.reason}, (0,))


async def read_chunks(stream: Callable[[], AsyncIterator[JSON]],
                      samples: Sequence[StreamedPiece], where: str) -> None:
    """Each chunk of a request's stream (opened by ``stream()``) to the pieces of its
    responses (``samples``)."""
    async for chunk in stream():
        for one in samples:
            one.add(chunk, where)


async def stream_outputs(reader: asyncio.Future[None], samples: Sequence[StreamedPiece],
                         where: str) -> list[PieceOutput]:
    """The outputs of ``samples`` once ``reader`` (their ``read_chunks``) ends: cancelled (an
    interrupt) or the first one ended (``stop_at_boundary``), the tokens so far, finish reason
    "abort"; a cut stream's ``ReplicaDownError`` carries the first one's (``partial``).
    Cancelled, this cancels ``reader`` too."""
    got = samples[0]
    try:
        await asyncio.wait({reader})
    finally:
        if not reader.done():  # this call was cancelled: so is the stream
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
        elif not reader.cancelled():
            reader.exception()  # read (also when this call is cancelled meanwhile)
    if reader.cancelled() or got.closed:
        return [one.output(interrupted=True) for one in samples]
    try:
        reader.result()
        for one in samples:
            finished(one, where)
    except ReplicaDownError as exc:  # a cut stream: what came is kept (runtime.engine.faults)
        exc.partial = got.output(interrupted=True)
        raise
    return [one.output() for one in samples]
