"""verl's ``rebalance_requests`` live: the ``verl-rebalance`` policy's aborts at the gateway.

The router (``session.rebalance.VerlRebalance``) decides when (a healthy replica holds no
turn and no session in a tool call while another runs ``min_running`` turns or more, at most
``max_rebalances`` times a step) and where (every sticky pin cleared, each aborted session to
the replica with the fewest retries placed). ``AbortAndResume`` asks it after every event
that can change the answer (a turn placed, a turn ended, a session ended) and carries the
answer out as the agentic simulator does (``sim.agentic.step``): every running turn's piece
ends and the turn goes on from its tokens so far on its new pin.

- A piece ends at once where the runner interrupts pieces (SGLang; vLLM pieces streamed,
  ``GatewayConfig.stream``), a streamed turn's (``on_tokens``) through the streamer; else at
  its end: with ``verl-rebalance`` a turn then runs in pieces (``MoveSettings.piece_cap``).
- A turn whose pin is the replica it runs on keeps running: verl's abort and resume there
  would cost a seam and a cached re-prefill, and change nothing else.
- A turn that cannot be continued elsewhere (penalties, which count the tokens generated so
  far; a streamed turn whose prompt went as text and whose ids no server echoed yet) keeps its
  replica, as it would under a fault.
"""

from __future__ import annotations

import logging

from tailsieve.runtime.execution.chain import penalties_of
from tailsieve.runtime.execution.turn_chain import RunningTurn
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.runtime.sessions.gateway_moves import MidTurnMoves
from tailsieve.session.rebalance import VerlRebalance

log = logging.getLogger(__name__)


class AbortAndResume:
    """Carries out ``router``'s rebalances over the running turns of ``moves`` (the
    gateway's, by session id) with its mechanics (``MidTurnMoves.send_on``), its clock and
    its list of the replicas in service."""

    def __init__(self, router: VerlRebalance, config: GatewayConfig, moves: MidTurnMoves,
                 ) -> None:
        self.router = router
        self.moves = moves
        self.book = moves.book
        self.turns = moves.turns
        self.healthy = moves.healthy
        self.now = moves.now
        self.piece_cap = config.move.piece_cap(moves.interrupter is not None)
        self.num_rebalances = 0  # made since the gateway started
        self.num_moved = 0  # turns sent to another replica by them

    def begin_step(self) -> None:
        """A step begins: verl rebalances at most ``max_rebalances`` times a step."""
        self.router.num_rebalances = 0

    def piece_tokens(self, streamed: bool) -> int | None:
        """The piece cap of a new turn: one piece where its piece can be ended at once
        (interrupted, or streamed to its sink) or no rebalance is left this step, else
        ``piece_cap``'s (an abort waits for the running piece's end)."""
        if self.moves.interrupter is not None or (streamed and self.moves.streamer is not None):
            return None
        if self.router.num_rebalances >= self.router.max_rebalances:
            return None
        return self.piece_cap

    def after_event(self) -> int:
        """Rebalance if the router says so now; returns the turns sent elsewhere. Nothing is
        read once the step's rebalances are spent. The book's views carry the gateway's
        health (``ReplicaHealth`` tells the book of every change)."""
        r = self.router
        if r.num_rebalances >= r.max_rebalances or not self.turns or not any(self.healthy):
            return 0
        views = self.book.views(self.now())
        if not r.should_rebalance(views):
            return 0
        pins = self.router.rebalance(list(self.turns), views)
        self.num_rebalances += 1
        moved = sum(1 for sid, dst in pins.items() if self.resume_on(self.turns[sid], dst))
        self.num_moved += moved
        log.info("session gateway: verl's rebalance_requests: %d running turns re-pinned, %d "
                 "sent to another replica", len(pins), moved)
        return moved

    def resume_on(self, rt: RunningTurn, dst: int) -> bool:
        """End ``rt``'s running piece and send its next one to ``dst``."""
        if dst == rt.replica or rt.chain.done or not self.healthy[dst] or not self.continues(rt):
            return False
        self.moves.send_on(rt, dst)
        return True

    @staticmethod
    def continues(rt: RunningTurn) -> bool:
        """Whether ``rt`` can go on elsewhere from its tokens so far."""
        if penalties_of(rt.sampling):
            return False
        return rt.sink is None or rt.chain.prompt_ids is not None
