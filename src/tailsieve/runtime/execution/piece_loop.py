"""The one loop that runs a ``RunningTurn`` to its end, piece by piece: a session gateway's
turn and a single-turn step's response (``runtime.step.chain_attempt``) alike. What differs between
them (their books, where a faulted turn goes, the error too many empty aborts raise) is their
``PieceOwner``'s; the rules are the loop's:

- an output joins the chain when it has tokens or ended without a fault (an empty abort only
  where the owner lists every piece it ran: ``keeps_empty``);
- a text prompt no server echoed the ids of cannot be continued: a piece with tokens that did
  not finish (a fault, an abort) is dropped, and the prompt sent again;
- a replica fault: the turn continues from its last seam where ``relocate`` puts it, or
  (``continues`` false) starts again from its prompt;
- at ``max_empty_aborts`` pieces in a row aborted with nothing kept (no token, or only tokens
  that had to be dropped), no move asked (``rt.replica`` unchanged), the turn fails with the
  owner's ``aborted`` error; a piece whose tokens join the chain starts the count again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from tailsieve.runtime.engine.faults import ReplicaDownError
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest
from tailsieve.runtime.execution.turn_chain import RunningTurn


class PieceOwner(ABC):
    """Who runs a turn's pieces and keeps the books around them (``run_pieces``)."""

    max_empty_aborts: int  # pieces in a row the server aborted with no token, no move asked
    keeps_empty = False  # an empty abort (no fault) joins the chain as a piece

    @abstractmethod
    def begin(self, rt: RunningTurn, piece: PieceRequest) -> PieceRequest:
        """Before ``piece`` (``rt.next_piece()``) is sent to ``rt.replica``: call
        ``rt.begin_piece`` and note its start. Returns the piece as it is sent."""

    @abstractmethod
    async def send(self, rt: RunningTurn, piece: PieceRequest, replica: int,
                   ) -> tuple[PieceOutput | None, ReplicaDownError | None]:
        """Run the piece on ``replica`` (``rt.send``): its output and the replica fault that
        ended it."""

    def ended(self, rt: RunningTurn, piece: PieceRequest, out: PieceOutput | None,
              fault: ReplicaDownError | None) -> ReplicaDownError | None:
        """The piece came back (before anything joins the chain). Returns the fault it ended
        with (the owner may name one the runner did not raise)."""
        return fault

    def continues(self, rt: RunningTurn) -> bool:
        """Whether a faulted turn continues from its last seam (else from its prompt)."""
        return True

    @abstractmethod
    def take(self, rt: RunningTurn, replica: int, piece: PieceRequest, out: PieceOutput,
             fault: ReplicaDownError | None) -> None:
        """The piece's output joins the chain (``rt.add``)."""

    @abstractmethod
    def lost(self, rt: RunningTurn, fault: ReplicaDownError | None, dropped: int) -> None:
        """A continued turn's piece ended with ``fault`` (after ``relocate``) or had
        ``dropped`` tokens that cannot be continued."""

    @abstractmethod
    async def relocate(self, rt: RunningTurn, replica: int, fault: ReplicaDownError,
                       restart: bool) -> None:
        """``replica`` failed under the turn (the loop does not call ``after`` for the
        piece): set where it continues (``rt.replica``); ``restart``: it starts again from its
        prompt (``rt.restart``, the owner's to call)."""

    @abstractmethod
    def aborted(self, rt: RunningTurn, replica: int) -> Exception:
        """The error a turn fails with after ``max_empty_aborts`` empty aborts on ``replica``."""

    @abstractmethod
    def after(self, rt: RunningTurn) -> None:
        """A piece ended without a fault and was handled (the turn may be done)."""


async def run_pieces(rt: RunningTurn, owner: PieceOwner) -> None:
    """Run ``rt`` piece by piece until its chain is done (see the module docstring)."""
    while not rt.chain.done:
        replica = rt.replica
        piece = owner.begin(rt, rt.next_piece())
        out, fault = await owner.send(rt, piece, replica)
        fault = owner.ended(rt, piece, out, fault)
        if fault is not None and not owner.continues(rt):
            await owner.relocate(rt, replica, fault, True)
            continue
        empty = out is not None and not out.token_ids and out.finish_reason == "abort"
        dropped = 0
        if out is not None:
            rt.learn_prompt(out)
            if out.token_ids and rt.chain.prompt_ids is None and (
                    fault is not None or out.finish_reason == "abort"):
                dropped = len(out.token_ids)
            elif out.token_ids or (fault is None and (not empty or owner.keeps_empty)):
                owner.take(rt, replica, piece, out, fault)
                if out.token_ids:
                    rt.empty_aborts = 0
        if fault is not None:
            await owner.relocate(rt, replica, fault, False)
        if fault is not None or dropped:
            owner.lost(rt, fault, dropped)
        if fault is not None:
            continue
        if (empty or dropped) and rt.replica == replica:
            rt.empty_aborts += 1
            if rt.empty_aborts >= owner.max_empty_aborts:
                raise owner.aborted(rt, replica)
        else:
            rt.empty_aborts = 0
        owner.after(rt)
