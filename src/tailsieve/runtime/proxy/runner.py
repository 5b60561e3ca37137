"""Pieces over HTTP with the detail a client's answer needs.

``DetailRunner`` runs each piece through ``HttpPieceRunner`` (token-id prompts, retries,
faults), which reads each server answer into the piece's ``detail`` (``piece_detail``: each
token's text and top logprobs as the server reported them, and the server's ``stop_reason``).
A streamed piece (one with a ``sink``) has no one answer: each chunk's detail goes on with its
tokens to the sink, and the piece's is gathered from them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tailsieve.runtime.backends import Backend
from tailsieve.runtime.proxy.sample import PieceDetail, extend_or_none
from tailsieve.runtime.sessions.http_runner import HttpPieceRunner
from tailsieve.runtime.sessions.pieces import PieceOutput, PieceRequest, TokenDelta


class DetailRunner:
    """A ``PieceRunner`` (and ``HealthProbe``) over ``HttpPieceRunner`` (built with
    ``detail=read_detail(backend)``) whose outputs' ``detail`` is a ``PieceDetail``."""

    def __init__(self, runner: HttpPieceRunner) -> None:
        self.runner = runner
        self.backend = runner.backend

    @property
    def endpoints(self) -> Sequence[str]:
        return self.runner.endpoints

    @property
    def streams_sinks(self) -> bool:
        return self.runner.streams_sinks

    def interrupt(self, replica: int, request_id: str) -> None:
        self.runner.interrupt(replica, request_id)

    def generated_tokens(self, request_id: str) -> int | None:
        return self.runner.generated_tokens(request_id)

    def cut(self, request_id: str) -> None:
        self.runner.cut(request_id)

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        chunks = _ChunkDetails() if piece.sink is not None else None
        if chunks is not None and piece.sink is not None:
            sink = piece.sink

            def relay(d: TokenDelta) -> None:
                det = chunks.add(piece_detail(self.backend, d.detail), len(d.token_ids))
                sink(TokenDelta(d.token_ids, d.text, d.logprobs, d.text_offsets, det))

            piece = replace(piece, sink=relay)
        out = await self.runner.run_piece(replica, piece)
        if out.detail is None and chunks is not None:  # streamed: no one answer
            out = replace(out, detail=chunks.detail(len(out.token_ids)))
        return out

    async def probe(self, replica: int) -> bool:
        return await self.runner.probe(replica)

    async def aclose(self) -> None:
        await self.runner.aclose()


@dataclass(slots=True)
class _ChunkDetails:
    """A streamed piece's detail, gathered chunk by chunk (a list is None once a chunk with
    tokens came without it)."""

    strs: list[str] | None = field(default_factory=list)
    tops: list[Any] | None = field(default_factory=list)
    stop_reason: int | str | None = None

    def add(self, d: PieceDetail | None, n: int) -> PieceDetail | None:
        """Take one chunk's detail (``n`` tokens); returns it."""
        if d is not None and d.stop_reason is not None:
            self.stop_reason = d.stop_reason
        if n:
            strs = d.token_strs if d is not None else None
            tops = d.tops if d is not None else None
            self.strs = extend_or_none(self.strs, strs, n)
            self.tops = extend_or_none(self.tops, tops, n)
        return d

    def detail(self, n: int) -> PieceDetail:
        """The piece's detail (``n`` tokens)."""
        return PieceDetail(
            tuple(self.strs) if self.strs is not None and len(self.strs) == n else None,
            tuple(self.tops) if self.tops is not None and len(self.tops) == n else None,
            self.stop_reason)


def read_detail(backend: Backend | str) -> Callable[[Any], PieceDetail | None]:
    """``HttpPieceRunner``'s ``detail`` reader for ``backend``."""
    b = Backend(backend)
    return lambda raw: piece_detail(b, raw)


def piece_detail(backend: Backend, raw: Any) -> PieceDetail | None:
    """The detail of one piece's raw answer (None when it has an unexpected shape)."""
    try:
        if backend is Backend.SGLANG:
            item = raw[0] if isinstance(raw, list) else raw
            fr = item["meta_info"].get("finish_reason")
            matched = fr.get("matched") if isinstance(fr, dict) else None
            return PieceDetail(stop_reason=matched if isinstance(matched, int | str) else None)
        ch = raw["choices"][0]
        lp = ch.get("logprobs") or {}
        toks = lp.get("tokens") if isinstance(lp, dict) else None
        tops = lp.get("top_logprobs") if isinstance(lp, dict) else None
        reason = ch.get("stop_reason")
        return PieceDetail(
            token_strs=tuple(str(t) for t in toks) if isinstance(toks, list) else None,
            tops=tuple(tops) if isinstance(tops, list) else None,
            stop_reason=reason if isinstance(reason, int | str) else None,
        )
    except (KeyError, TypeError, IndexError, AttributeError):
        return None
