"""Bounded pieces (how the live runtime runs a continued response) and what moving cost in one
simulated step (``sim.movepath``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailsieve.errors import ConfigError

__all__ = ["MoveStats", "Piece", "PieceSettings"]

Piece = tuple[int, int, int]  # (replica, first token index, end token index) of one piece


@dataclass(frozen=True, slots=True)
class PieceSettings:
    """How the live runtime runs a continued response: pieces of bounded length."""

    piece_tokens: int  # max tokens per piece
    seam_s: float = 0.0  # a piece end on the same replica: the response waits this long (round
    # trip); its continuation is charged like any (prefill_s + uncached prefix)
    keeps_running_piece: bool = False  # a move keeps the running piece's tokens (streaming)
    defer_moves: bool = True  # a move waits for the running piece's end, as the live runtime
    # does on vLLM (False: it cuts the piece, whose tokens are decoded again)
    stream_interval: int = 1  # with keeps_running_piece: tokens per streamed chunk (vLLM's
    # stream_interval); a move keeps the tokens streamed, the first at once and then every
    # ``stream_interval``, and the rest of the running piece is decoded again

    def __post_init__(self) -> None:
        if self.piece_tokens < 1:
            raise ConfigError(f"piece_tokens must be >= 1, got {self.piece_tokens}")
        if self.seam_s < 0:
            raise ConfigError(f"piece seam_s must be >= 0, got {self.seam_s}")
        if self.stream_interval < 1:
            raise ConfigError(f"stream_interval must be >= 1, got {self.stream_interval}")

    @classmethod
    def streamed(cls, stream_interval: int = 1) -> PieceSettings:
        """One piece per response until it moves, streamed in chunks of ``stream_interval``
        tokens (a move keeps what was streamed)."""
        return cls(piece_tokens=2**62, keeps_running_piece=True, defer_moves=False,
                   stream_interval=stream_interval)

    def kept_on_move(self, generated: int) -> int:
        """Tokens of a running piece a move keeps, of ``generated``: all of them without
        pieces' loss (streaming, SGLang's abort), else the streamed chunks."""
        k = self.stream_interval
        if k <= 1 or generated <= 1:
            return generated
        return 1 + (generated - 1) // k * k


@dataclass(slots=True)
class MoveStats:
    """What moving cost in one step."""

    num_moves: int = 0
    moved_tokens: int = 0  # prefix tokens carried by continuations (prompt + generated)
    prefill_tokens: int = 0  # of them, not in the destination's prefix cache
    prefill_s: float = 0.0  # destination stall for those prefills, seconds
    num_checks: int = 0  # re-balance checks made
    dropped_tokens: int = 0  # tokens of running pieces a move dropped (decoded again)
    pieces: list[list[Piece]] = field(default_factory=list)  # per request: its chain
