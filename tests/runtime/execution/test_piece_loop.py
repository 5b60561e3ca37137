"""The one piece loop (``run_pieces``): the rules it keeps for every owner."""

from __future__ import annotations

import asyncio

import pytest

from tailsieve.runtime.engine.backends import SamplingParams
from tailsieve.runtime.engine.faults import ReplicaDownError
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest
from tailsieve.runtime.execution.piece_loop import PieceOwner, run_pieces
from tailsieve.runtime.execution.turn_chain import RunningTurn


class TooManyAborts(Exception):
    pass


class Scripted(PieceOwner):
    """Answers each piece from ``script`` (an output, a fault, or both); ``move_on``: the piece
    numbers a move is asked during (the turn's replica changes)."""

    def __init__(self, script: list[tuple[PieceOutput | None, ReplicaDownError | None]],
                 limit: int = 3, keeps_empty: bool = False, move_on: tuple[int, ...] = (),
                 continues: bool = True) -> None:
        self.script, self.max_empty_aborts, self.keeps_empty = list(script), limit, keeps_empty
        self.move_on, self._continues = move_on, continues
        self.events: list[str] = []
        self.sent = 0

    def begin(self, rt: RunningTurn, piece: PieceRequest) -> PieceRequest:
        rt.begin_piece(0.0)
        return piece

    async def send(self, rt: RunningTurn, piece: PieceRequest, replica: int,
                   ) -> tuple[PieceOutput | None, ReplicaDownError | None]:
        if self.sent in self.move_on:
            rt.replica = 1 - rt.replica
        self.sent += 1
        rt.piece_on = None
        return self.script.pop(0)

    def continues(self, rt: RunningTurn) -> bool:
        return self._continues

    def take(self, rt: RunningTurn, replica: int, piece: PieceRequest, out: PieceOutput,
             fault: ReplicaDownError | None) -> None:
        self.events.append(f"take {len(out.token_ids)}")
        rt.add(replica, piece, out)

    def lost(self, rt: RunningTurn, fault: ReplicaDownError | None, dropped: int) -> None:
        self.events.append(f"lost {dropped}")

    async def relocate(self, rt: RunningTurn, replica: int, fault: ReplicaDownError,
                       restart: bool) -> None:
        self.events.append("restart" if restart else "relocate")
        if restart:
            rt.restart()
        rt.replica = 1 - replica

    def aborted(self, rt: RunningTurn, replica: int) -> Exception:
        return TooManyAborts(rt.empty_aborts)

    def after(self, rt: RunningTurn) -> None:
        self.events.append("after")


def turn(max_tokens: int = 4, text: str | None = None) -> RunningTurn:
    return RunningTurn.start("s", "t", () if text else (1, 2), SamplingParams(max_tokens), 0,
                             2, prompt_text=text)


EMPTY = PieceOutput((), "abort")
DOWN = ReplicaDownError("down")


def test_empty_aborts_in_a_row_fail_the_turn_with_the_owners_error() -> None:
    owner = Scripted([(EMPTY, None)] * 3)
    with pytest.raises(TooManyAborts):
        asyncio.run(run_pieces(turn(), owner))
    assert owner.events == ["after", "after"]  # an empty abort does not join the chain


def test_an_empty_abort_a_move_asked_for_does_not_count() -> None:
    owner = Scripted([(EMPTY, None), (EMPTY, None), (EMPTY, None), (EMPTY, None),
                      (PieceOutput((5, 6), "length"), None), (PieceOutput((7, 8), "length"), None)],
                     keeps_empty=True, move_on=(1,))
    rt = turn()
    asyncio.run(run_pieces(rt, owner))
    assert rt.chain.generated_ids == (5, 6, 7, 8)
    assert owner.events.count("take 0") == 4  # kept: the owner lists every piece it ran


def test_a_fault_keeps_the_streamed_tokens_and_continues_elsewhere() -> None:
    owner = Scripted([(PieceOutput((5,), "abort"), DOWN), (PieceOutput((6, 7, 8), "length"), None)])
    rt = turn()
    asyncio.run(run_pieces(rt, owner))
    assert rt.chain.generated_ids == (5, 6, 7, 8)
    assert owner.events[:3] == ["take 1", "relocate", "lost 0"]


def test_without_continuation_a_fault_restarts_the_turn_from_its_prompt() -> None:
    owner = Scripted([(PieceOutput((5,), "abort"), DOWN), (PieceOutput((6, 7), "length"), None),
                      (PieceOutput((8, 9), "length"), None)], continues=False)
    rt = turn()
    asyncio.run(run_pieces(rt, owner))
    assert rt.chain.generated_ids == (6, 7, 8, 9)
    assert owner.events[0] == "restart"


def test_an_unfinished_piece_of_a_text_prompt_with_no_echoed_ids_is_dropped() -> None:
    owner = Scripted([(PieceOutput((5,), "abort"), None),
                      (PieceOutput((6, 7), "length", prompt_ids=(1, 2)), None),
                      (PieceOutput((8, 9), "length"), None)])
    rt = turn(text="hello")
    asyncio.run(run_pieces(rt, owner))
    assert rt.chain.generated_ids == (6, 7, 8, 9)
    assert rt.chain.prompt_ids == (1, 2)
    assert owner.events[0] == "lost 1"


def test_a_text_prompt_aborted_again_and_again_with_tokens_it_must_drop_fails_the_turn() -> None:
    """Dropped tokens are nothing kept: a server that aborts every such piece ends the turn at
    the limit instead of being asked again forever."""
    owner = Scripted([(PieceOutput((5, 6), "abort"), None)] * 3)
    with pytest.raises(TooManyAborts):
        asyncio.run(run_pieces(turn(text="hello"), owner))
    assert owner.events == ["lost 2", "after"] * 2 + ["lost 2"]


def test_tokens_kept_between_empty_aborts_start_the_count_again() -> None:
    owner = Scripted([(EMPTY, None), (EMPTY, None), (PieceOutput((5,), "abort"), DOWN),
                      (EMPTY, None), (EMPTY, None), (PieceOutput((6, 7, 8), "length"), None)])
    rt = turn()
    asyncio.run(run_pieces(rt, owner))
    assert rt.chain.generated_ids == (5, 6, 7, 8)
