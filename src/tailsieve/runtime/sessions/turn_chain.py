"""One running turn as a chain of pieces: the state the gateway keeps while it runs.

The joining is ``runtime.chain.ResponseChain``'s (token ids, text and logprobs concatenated,
the last piece's finish reason, a stop string across a seam cut where the server would have
cut it, ``min_tokens`` carried over); this module only builds each piece's request from the
chain and takes its output back.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace

from tailsieve.runtime.backends import PromptInput, SamplingParams, with_encoded_ids
from tailsieve.runtime.chain import Piece, ResponseChain
from tailsieve.runtime.sessions.pieces import PieceOutput, PieceRequest
from tailsieve.runtime.sessions.result import PieceSpan, TurnResult


@dataclass(slots=True)
class RunningTurn:
    """A turn being generated."""

    session_id: Hashable
    turn_id: str  # names its pieces' request ids
    prompt: PromptInput  # the turn's whole prompt (context + new tokens) as token ids
    sampling: SamplingParams  # as sent (logprobs=0 added when stop strings need offsets)
    chain: ResponseChain
    replica: int  # where its next piece goes (a move changes it)
    piece_tokens: int | None  # the piece cap (None: one piece)
    want_logprobs: bool  # the caller asked for logprobs
    piece_on: int | None = None  # replica its running piece runs on (None: between pieces)
    spans: list[PieceSpan] = field(default_factory=list)
    num_relocations: int = 0
    empty_aborts: int = 0  # consecutive pieces the server aborted with no token
    has_text: bool = True  # every piece came with its text
    expect_hit: int = 0  # prompt tokens of the next piece expected cached where it goes
    on_piece: Callable[[PieceSpan, PieceOutput], None] | None = None  # told of each piece
    hold_pieces: int = 0  # after a move: no other move before this many pieces have ended
    piece_started_s: float = 0.0  # when the running piece was sent (the gateway's clock)

    @classmethod
    def start(cls, session_id: Hashable, turn_id: str, prompt_ids: tuple[int, ...],
              sampling: SamplingParams, replica: int, piece_tokens: int | None,
              expect_hit: int = 0) -> RunningTurn:
        want = sampling.logprobs is not None
        if sampling.stop and not want:  # a stop string across a seam needs text offsets
            sampling = replace(sampling, logprobs=0)
        prompt = with_encoded_ids(PromptInput(turn_id, token_ids=tuple(prompt_ids)))
        chain = ResponseChain(max_tokens=sampling.max_tokens, prompt_ids=prompt.token_ids,
                              stop=tuple(sampling.stop or ()))
        return cls(session_id, turn_id, prompt, sampling, chain, replica, piece_tokens, want,
                   expect_hit=expect_hit)

    @property
    def prefix_tokens(self) -> int:
        """The prompt plus the tokens generated so far (what a continuation carries)."""
        return len(self.prompt.token_ids or ()) + self.chain.num_generated

    @property
    def waiting_on_move(self) -> bool:
        """A move was made while a piece runs elsewhere: it takes effect at the piece's end."""
        return self.piece_on is not None and self.piece_on != self.replica

    @property
    def movable(self) -> bool:
        """The turn may move now: it runs in pieces, and since its last move a piece has
        ended on the destination (a moved turn advances before it moves again: no
        ping-pong on estimates its move has not yet changed)."""
        return (self.piece_tokens is not None and not self.chain.done
                and len(self.spans) >= self.hold_pieces)

    def moved(self) -> None:
        """A move was made: hold the turn until the running piece (if any) and one piece on
        the destination have ended."""
        self.hold_pieces = len(self.spans) + (2 if self.piece_on is not None else 1)

    def next_piece(self) -> PieceRequest:
        """The request of the next piece (the prompt plus every token generated so far)."""
        chain = self.chain
        prompt = chain.next_prompt(self.prompt)
        ids = prompt.token_ids
        assert ids is not None
        return PieceRequest(
            prompt_ids=ids,
            sampling=chain.piece_sampling(self.sampling, self.piece_tokens),
            max_tokens=chain.piece_cap(self.piece_tokens),
            request_id=f"{self.turn_id}-{len(self.spans)}",
            prompt_json=getattr(ids, "json", None),
        )

    def add(self, replica: int, piece: PieceRequest, out: PieceOutput) -> None:
        """Take a piece's output into the chain. A piece the server aborted keeps its tokens
        and the turn continues from there."""
        reason = "moved" if out.finish_reason == "abort" else out.finish_reason
        self.has_text = self.has_text and out.text is not None
        start = self.chain.num_generated
        self.chain.add(Piece(out.token_ids, out.text or "", reason, out.logprobs,
                             out.text_offsets, replica), piece.max_tokens)
        self.spans.append(PieceSpan(replica, start, start + len(out.token_ids),
                                    out.num_cached_tokens))
        self.empty_aborts = self.empty_aborts + 1 if reason == "moved" and not out.token_ids \
            else 0
        self.expect_hit = len(piece.prompt_ids) + len(out.token_ids)  # if it stays here

    def restart(self) -> None:
        """Forget every piece (a turn that cannot be continued starts again from its prompt)."""
        while self.chain.pieces:
            self.chain.drop_last()
        self.spans.clear()
        self.has_text = True
        self.expect_hit = 0

    def result(self, placed: int, moved: bool, reason: str, prefill_tokens: int,
               ) -> TurnResult:
        final = self.chain.final
        assert final is not None
        return TurnResult(
            token_ids=tuple(final.token_ids or ()),
            text=final.text if self.has_text else None,
            logprobs=final.logprobs if self.want_logprobs else None,
            finish_reason=final.finish_reason,
            pieces=tuple(self.spans),
            replica=placed,
            moved=moved,
            reason=reason,
            prefill_tokens=prefill_tokens,
            num_relocations=self.num_relocations,
        )
