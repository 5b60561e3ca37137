"""What the session gateway returns: one turn's joined chain, and its running totals."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailsieve.runtime.execution.chain import Piece


@dataclass(frozen=True, slots=True)
class PieceSpan:
    """Where one piece of a turn ran: output tokens ``start .. end - 1`` on ``replica``."""

    replica: int
    start: int  # index of its first output token in the turn's output
    end: int  # one past its last
    num_cached_tokens: int | None = None  # prompt tokens its server found cached (None: not
    # reported)


@dataclass(frozen=True, slots=True)
class TurnResult:
    """One turn as if generated in one request: the chain of its pieces joined (token ids,
    text and logprobs concatenated, the last piece's finish reason; cut at a stop string that
    spans a seam). ``chain``: the pieces joined, each with what its engine said beyond the
    tokens (token texts, top logprobs, stop reason; verl's ``detail``): what a front door's
    answer reads beyond the join (a view over the chain, never a second join)."""

    token_ids: tuple[int, ...]
    text: str | None  # None: the runner returned no text
    logprobs: tuple[float, ...] | None  # when asked for
    finish_reason: str  # "stop" | "length"
    pieces: tuple[PieceSpan, ...]
    replica: int  # where the turn was placed (its first piece)
    moved: bool  # placed away from the replica of the session's previous turn
    reason: str  # the placement's reason: "first" | "stay" | "move" | "home-down" | ...
    prefill_tokens: int  # context tokens the router expected to prefill at the placement
    num_relocations: int = 0  # pieces continued elsewhere after a replica fault
    chain: tuple[Piece, ...] = field(default=(), repr=False)
    prompt_ids: tuple[int, ...] | None = field(default=None, repr=False)  # the turn's prompt
    # as ids (a text prompt's as its server echoed them; None: not echoed)

    @property
    def num_cached_tokens(self) -> int | None:
        """Prompt tokens the first piece's server found cached: the turn's prefix hit."""
        return self.pieces[0].num_cached_tokens if self.pieces else None

    @property
    def num_mid_turn_moves(self) -> int:
        """Pieces that began on another replica than the piece before them."""
        return sum(a.replica != b.replica for a, b in zip(self.pieces, self.pieces[1:],
                                                          strict=False))


@dataclass(frozen=True, slots=True)
class ReplicaStat:
    """One replica as the gateway sees it."""

    replica: int
    healthy: bool
    num_running: int  # turns decoding there now
    num_waiting: int  # turns queued there (as the book counts them)
    num_tool_waits: int  # sessions whose last turn ran there, now in a tool call
    context_tokens: float  # context held by its running turns
    num_turns: int  # turns placed there so far
    num_pieces: int  # pieces run there so far


@dataclass(frozen=True, slots=True)
class GatewayStats:
    """Running totals of a gateway (what ``/metrics`` and verl's ``get_status`` expose)."""

    num_turns: int = 0  # turns completed (delivered)
    num_failed_turns: int = 0  # turns that ended in an error or were cancelled
    num_running: int = 0  # turns running now
    num_pieces: int = 0  # pieces completed
    moves_at_boundary: int = 0  # turns placed away from their session's previous replica
    moves_mid_turn: int = 0  # running turns moved at a piece end
    num_relocations: int = 0  # pieces continued elsewhere after a replica fault
    prefix_query_tokens: int = 0  # prompt tokens of every piece sent
    prefix_hit_tokens: int = 0  # of them, found cached (servers' count where reported, else
    # the router's estimate)
    reprefill_tokens: int = 0  # context tokens prefilled again because a turn left the
    # replica that held them (boundary and mid-turn moves, the router's estimate)
    rebalancer_checks: int = 0  # mid-turn re-balance checks made
    rebalancer_crashes: int = 0  # mid-turn rebalancer crashes (each turns moves off)
    moves_off_reason: str | None = None  # why running turns do not move now (None: they do)
    replicas: tuple[ReplicaStat, ...] = field(default_factory=tuple)

    @property
    def prefix_hit_rate(self) -> float:
        """Share of the prompt tokens sent that were found cached (0 before any)."""
        q = self.prefix_query_tokens
        return self.prefix_hit_tokens / q if q else 0.0
