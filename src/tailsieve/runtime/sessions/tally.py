"""The gateway's running totals (``GatewayStats`` is their snapshot)."""

from __future__ import annotations

from collections.abc import Sequence

from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest
from tailsieve.runtime.execution.result import GatewayStats, ReplicaStat
from tailsieve.runtime.sessions.parts import Placement
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.turn import TurnRequest


class Tally:
    """Counters the gateway bumps as turns are placed, pieces run and turns move."""

    def __init__(self, num_replicas: int) -> None:
        self.num_turns = 0
        self.num_failed = 0
        self.num_pieces = 0
        self.moves_at_boundary = 0
        self.moves_mid_turn = 0
        self.num_relocations = 0
        self.query_tokens = 0
        self.hit_tokens = 0
        self.reprefill_tokens = 0
        self.crashes = 0
        self.turns_on = [0] * num_replicas
        self.pieces_on = [0] * num_replicas

    def placed(self, d: Placement, turn: TurnRequest) -> None:
        """A turn was placed; a move away from home re-prefills what home held and ``d``'s
        replica does not."""
        self.turns_on[d.replica] += 1
        if d.moved and turn.home is not None:
            self.moves_at_boundary += 1
            held = turn.cached_on(turn.home)
            self.reprefill_tokens += max(0, held - turn.cached_on(d.replica))

    def piece(self, replica: int, piece: PieceRequest, out: PieceOutput,
              expected_hit: int) -> None:
        """A piece ran; its prefix hit is the server's count where reported, else
        ``expected_hit`` (the router's estimate)."""
        self.num_pieces += 1
        self.pieces_on[replica] += 1
        self.query_tokens += len(piece.prompt_ids)
        hit = out.num_cached_tokens if out.num_cached_tokens is not None else expected_hit
        self.hit_tokens += max(0, min(hit, len(piece.prompt_ids)))

    def moved(self, reprefill_tokens: int) -> None:
        self.moves_mid_turn += 1
        self.reprefill_tokens += max(0, reprefill_tokens)

    def relocated(self, reprefill_tokens: int) -> None:
        self.num_relocations += 1
        self.reprefill_tokens += max(0, reprefill_tokens)

    def ended(self, delivered: bool) -> None:
        if delivered:
            self.num_turns += 1
        else:
            self.num_failed += 1

    def crashed(self) -> None:
        self.crashes += 1

    def stats(self, views: Sequence[ReplicaView], healthy: Sequence[bool], num_running: int,
              num_checks: int, moves_off_reason: str | None) -> GatewayStats:
        reps = tuple(
            ReplicaStat(v.replica, healthy[v.replica], v.num_running, v.num_waiting,
                        v.num_tool_waits, float(v.context_tokens), self.turns_on[v.replica],
                        self.pieces_on[v.replica])
            for v in views)  # fmt: skip
        return GatewayStats(
            num_turns=self.num_turns, num_failed_turns=self.num_failed, num_running=num_running,
            num_pieces=self.num_pieces, moves_at_boundary=self.moves_at_boundary,
            moves_mid_turn=self.moves_mid_turn, num_relocations=self.num_relocations,
            prefix_query_tokens=self.query_tokens, prefix_hit_tokens=self.hit_tokens,
            reprefill_tokens=self.reprefill_tokens, rebalancer_checks=num_checks,
            rebalancer_crashes=self.crashes, moves_off_reason=moves_off_reason, replicas=reps,
        )
