"""A streamed piece as it arrives: vLLM's ``/v1/completions`` server-sent events gathered into
one ``PieceOutput``, readable at any moment (a move that closes the stream keeps what came).

Each chunk carries the piece's next token ids (``return_token_ids``), their text, and their
logprobs when asked; the last choice chunk its finish reason, the usage chunk (``stream_options
.include_usage``) the prompt tokens the server found cached (``--enable-prompt-tokens-details``).
A token's text offset is known where it came in a chunk of its own (every token streamed, the
default ``stream_interval``), else from the chunk's logprobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tailsieve.runtime.faults import RequestError, check_finished
from tailsieve.runtime.sessions.pieces import FINISH_REASONS, PieceOutput
from tailsieve.runtime.transport import JSON


@dataclass(slots=True)
class StreamedPiece:
    """What a streamed piece has delivered so far."""

    ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # text offset of each token, where known
    num_chars: int = 0
    reason: str = ""  # the finish reason, once it came
    cached_tokens: int | None = None

    def add(self, chunk: JSON, where: str) -> None:
        """Take one chunk (a malformed one is a ``RequestError``)."""
        try:
            self._add(chunk)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RequestError(f"{where}: unexpected stream chunk ({exc!r})") from exc

    def _add(self, chunk: JSON) -> None:
        usage = chunk.get("usage")
        if usage:
            details = usage.get("prompt_tokens_details") or {}
            got = details.get("cached_tokens")
            if isinstance(got, int) and not isinstance(got, bool):
                self.cached_tokens = got
        for ch in chunk.get("choices") or ():
            text = ch.get("text") or ""
            toks = [int(t) for t in ch.get("token_ids") or ()]
            lp = ch.get("logprobs") or {}
            vals = lp.get("token_logprobs") if isinstance(lp, dict) else None
            if vals:
                self.logprobs.extend(float(v) for v in vals if v is not None)
            offs = lp.get("text_offset") if isinstance(lp, dict) else None
            if len(toks) == 1:
                self.offsets.append(self.num_chars)
            elif offs and len(offs) == len(toks):
                base = int(offs[0])
                self.offsets.extend(self.num_chars + int(o) - base for o in offs)
            self.ids.extend(toks)
            self.texts.append(text)
            self.num_chars += len(text)
            if ch.get("finish_reason"):
                self.reason = str(ch["finish_reason"])

    def output(self, interrupted: bool = False) -> PieceOutput:
        """The piece as delivered: finish reason "abort" when it was interrupted before its
        end (a server-specific reason is read as "abort" too)."""
        reason = "abort" if interrupted and not self.reason else self.reason
        if reason not in FINISH_REASONS:
            reason = "abort"
        n = len(self.ids)
        return PieceOutput(
            token_ids=tuple(self.ids), finish_reason=reason, text="".join(self.texts),
            logprobs=tuple(self.logprobs) if self.logprobs and len(self.logprobs) == n else None,
            text_offsets=tuple(self.offsets) if len(self.offsets) == n else None,
            num_cached_tokens=self.cached_tokens)


def finished(piece: StreamedPiece, where: str) -> None:
    """A stream that ended must have said why (else it was cut: a replica fault,
    ``runtime.faults.check_finished``)."""
    check_finished(where, {0: piece.reason}, (0,))
