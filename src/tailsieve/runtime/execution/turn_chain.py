"""One running turn as a chain of pieces: the state the gateway keeps while it runs.

The joining is ``runtime.execution.chain.ResponseChain``'s (token ids, text and logprobs concatenated,
the last piece's finish reason, a stop string across a seam cut where the server would have
cut it, ``min_tokens`` carried over); this module only builds each piece's request from the
chain and takes its output back. A turn with a ``sink`` (a streamed answer) hands it every
token once, in order, with its index in the turn's output: as its piece streams them where the
runner streams, else at the piece's end; a piece cut short keeps what it streamed. A turn
started from text (``prompt_text``: a prompt no one has tokenized yet) sends its first piece
as text; the server tokenizes it and echoes its ids (``PieceOutput.prompt_ids``), which the
chain keeps for the pieces after it (and the ``TurnResult``). ``RunningTurn.send`` runs one
piece (watched for stalls, timed for the ``auto`` profile); ``piece_loop.run_pieces`` runs a
turn to its end: the session gateway's turns and a single-turn step's responses
(``runtime.step.chain_attempt``) alike.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tailsieve.core.drain import engine_priority
from tailsieve.runtime.engine.backends import (
    PromptInput,
    Response,
    SamplingParams,
    with_encoded_ids,
)
from tailsieve.runtime.engine.faults import ReplicaDownError
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest, PieceRunner, TokenDelta
from tailsieve.runtime.execution.chain import ChainError, ResponseChain
from tailsieve.runtime.execution.result import PieceSpan, TurnResult

if TYPE_CHECKING:
    from tailsieve.runtime.execution.profile import LiveProfile
    from tailsieve.runtime.execution.stall_watch import StallWatch

TurnSink = Callable[[int, TokenDelta], None]  # (index of the first token in the turn's output,
# the tokens)


@dataclass(slots=True)
class RunningTurn:
    """A turn being generated."""

    session_id: Hashable
    turn_id: str  # names its pieces' request ids
    prompt: PromptInput  # the turn's whole prompt (context + new tokens) as token ids, or
    # as text until a server echoed its ids
    sampling: SamplingParams  # as sent (logprobs=0 added when stop strings need offsets)
    chain: ResponseChain
    replica: int  # where its next piece goes (a move changes it)
    piece_tokens: int | None  # the piece cap (None: one piece)
    moves: bool  # it may move mid-turn
    want_logprobs: bool  # the caller asked for logprobs
    piece_on: int | None = None  # replica its running piece runs on (None: between pieces)
    spans: list[PieceSpan] = field(default_factory=list)
    num_relocations: int = 0
    empty_aborts: int = 0  # pieces in a row the server aborted with no token, no move asked
    has_text: bool = True  # every piece came with its text
    expect_hit: int = 0  # prompt tokens of the next piece expected cached where it goes
    on_piece: Callable[[PieceSpan, PieceOutput], None] | None = None  # told of each piece
    hold_pieces: int = 0  # after a move: no other move before this many pieces have ended
    piece_started_s: float = 0.0  # when the running piece was sent (the gateway's clock)
    booked: int = -1  # the replica the session book has it on (its last piece's)
    piece_id: str = ""  # request id of the running (or last) piece
    sink: TurnSink | None = None  # told of every token as it comes (a streamed answer)
    streamed_chars: int | None = None  # text the running piece streamed to ``sink`` (None:
    # it streams to none)
    streamed_tokens: int = 0  # tokens the running piece streamed
    engine_args: Mapping[str, Any] | None = None  # passed with every piece (``PieceRequest``)
    text_tokens: int = 0  # a text prompt's estimated length, tokens, until its ids are known
    forced: bool = False  # replay: each piece generates exactly its cap (the chain's length)
    priority_bucket: int | None = None  # each piece's engine priority by the tokens generated
    # so far (``core.drain.engine_priority``); None: not sent
    num_sent: int = 0  # pieces sent
    unique_ids: bool = False  # each piece its own request id (else a piece lost with its
    # replica is asked again under its id: the id names its place in the chain)
    texts: bool = True  # keep each token's text in the chain (what a per-token answer reads)

    @classmethod
    def start(cls, session_id: Hashable, turn_id: str, prompt_ids: tuple[int, ...],
              sampling: SamplingParams, replica: int, piece_tokens: int | None,
              expect_hit: int = 0, moves: bool | None = None, prompt_text: str | None = None,
              text_tokens: int = 0) -> RunningTurn:
        """``moves``: it may move mid-turn (default: when it runs in pieces). With
        ``prompt_text`` (and no ``prompt_ids``) the prompt goes as text, ``text_tokens`` long
        by estimate."""
        want = sampling.logprobs is not None
        sampling = seam_sampling(sampling)
        if prompt_ids or prompt_text is None:
            prompt = with_encoded_ids(PromptInput(turn_id, token_ids=tuple(prompt_ids)))
        else:
            prompt = PromptInput(turn_id, text=prompt_text)
        chain = ResponseChain(max_tokens=sampling.max_tokens, prompt_ids=prompt.token_ids,
                              stop=tuple(sampling.stop or ()))
        movable = piece_tokens is not None if moves is None else moves
        return cls(session_id, turn_id, prompt, sampling, chain, replica, piece_tokens, movable,
                   want, expect_hit=expect_hit, booked=replica, text_tokens=text_tokens)

    @property
    def prompt_tokens(self) -> int:
        """The prompt's length: its ids', or the text's estimate until they are known."""
        ids = self.chain.prompt_ids
        return len(ids) if ids is not None else self.text_tokens

    @property
    def prefix_tokens(self) -> int:
        """The prompt plus the tokens generated so far (what a continuation carries)."""
        return self.prompt_tokens + self.chain.num_generated

    @property
    def movable(self) -> bool:
        """The turn may move now: it may move mid-turn, and its last move took effect (a
        moved turn advances before it moves again: no ping-pong on estimates its move has
        not yet changed)."""
        return self.moves and not self.chain.done and len(self.spans) >= self.hold_pieces

    @property
    def cap_tokens(self) -> int:
        """The most tokens the next (or running) piece may add by the sampling's ``max_tokens``
        (never a forced length): what is left, at most ``piece_tokens``."""
        left = self.sampling.max_tokens - self.chain.num_generated
        return max(0, left if self.piece_tokens is None else min(left, self.piece_tokens))

    def moved(self, interrupted: bool) -> None:
        """A move was made. ``interrupted``: the running piece (if any) ends at once, and the
        turn may move again once its next piece started on the destination (as the agentic
        simulator's moves at once); else it is held until the running piece (if any) and one
        piece on the destination have ended (as the simulator's moves at piece ends)."""
        running = 1 if self.piece_on is not None else 0
        self.hold_pieces = len(self.spans) + (running if interrupted else running + 1)

    def next_piece(self) -> PieceRequest:
        """The request of the next piece (the prompt plus every token generated so far; the
        prompt's text or chat messages while no server has echoed its ids, which needs nothing
        generated)."""
        chain = self.chain
        text = None
        if chain.prompt_ids is None:
            if chain.num_generated:
                raise ChainError(f"turn {self.turn_id!r}: the server did not echo the text "
                                 "prompt's token ids, so the turn cannot be continued")
            ids: tuple[int, ...] = ()
            text = self.prompt.text
        else:
            ids = chain.next_prompt(self.prompt).token_ids or chain.prompt_ids
        self.streamed_chars, self.streamed_tokens = (0 if self.sink is not None else None), 0
        sp = self.sampling
        if "min_tokens" in sp.extra:  # else the piece's cap is its ``max_tokens`` alone
            sp = chain.piece_sampling(sp, self.piece_tokens)
        self.piece_id = f"{self.turn_id}-{self.num_sent if self.unique_ids else len(self.spans)}"
        self.num_sent += 1
        bucket = self.priority_bucket
        return PieceRequest(
            prompt_ids=ids,
            prompt_text=text,
            messages=self.prompt.messages,
            sampling=sp,
            max_tokens=chain.piece_cap(self.piece_tokens),
            request_id=self.piece_id,
            sink=self._streamed if self.sink is not None else None,
            engine_args=self.engine_args,
            forced=self.forced,
            priority=None if bucket is None else engine_priority(chain.num_generated, bucket),
        )

    def begin_piece(self, now_s: float) -> bool:
        """The piece from ``next_piece`` is sent to ``replica`` at ``now_s``. Returns whether a
        move takes effect with it (it goes elsewhere than the last piece; a relocation sets
        ``booked`` itself)."""
        moved = self.booked != self.replica
        self.piece_on, self.piece_started_s, self.booked = self.replica, now_s, self.replica
        return moved

    async def send(self, piece: PieceRequest, runner: PieceRunner, target: int,
                   stalls: StallWatch | None, profile: LiveProfile | None,
                   clock: Callable[[], float], timed_as: Hashable,
                   watched_as: Hashable | None = None,
                   rest: Callable[[], Sequence[PieceOutput]] | None = None,
                   ) -> tuple[PieceOutput | None, ReplicaDownError | None]:
        """Run ``piece`` (after ``begin_piece``) on the runner's replica ``target``, under the
        stall watch (``watched_as``: the replica as the watch names it; default ``target``),
        timed for the ``auto`` profile as a piece of replica ``timed_as`` (``clock``: the
        seconds ``begin_piece`` was given). Returns its output (a streamed piece's partial one
        when a fault cut it) and the replica fault that ended it; any other error is raised.
        A piece of ``num_samples`` responses: the runner returns the first, ``rest`` the
        others (timed with it)."""
        started = self.piece_started_s
        timed = (profile.time_piece(timed_as, started, piece, self.prompt_tokens)
                 if profile is not None else None)
        out: PieceOutput | None = None
        fault: ReplicaDownError | None = None
        try:
            if stalls is not None:
                out, fault = await stalls.piece(runner, target, piece, watched_as)
            else:
                try:
                    out = await runner.run_piece(target, piece)
                except ReplicaDownError as exc:
                    out, fault = exc.partial, exc
        finally:
            self.piece_on = None
            if profile is not None:
                profile.record_piece(timed, started, clock(),
                                     None if out is None or fault
                                     else [out, *(rest() if rest is not None else ())])
        return out, fault

    def _streamed(self, d: TokenDelta) -> None:
        """The running piece streamed ``d``: on to the turn's sink, at its index."""
        assert self.streamed_chars is not None and self.sink is not None
        self.streamed_chars += len(d.text)
        start = self.chain.num_generated + self.streamed_tokens
        self.streamed_tokens += len(d.token_ids)
        self.sink(start, d)

    def learn_prompt(self, out: PieceOutput) -> None:
        """A text prompt's ids, once a server echoed them, become the prompt's."""
        ids = out.prompt_ids or self.prompt.token_ids
        if self.chain.prompt_ids is None and ids:
            self.prompt = with_encoded_ids(PromptInput(self.turn_id, token_ids=ids))
            self.chain.prompt_ids = self.prompt.token_ids

    def add(self, replica: int, piece: PieceRequest, out: PieceOutput) -> None:
        """Take a piece's output into the chain. A piece the server aborted keeps its tokens
        and the turn continues from there. A text prompt's echoed ids become the prompt's."""
        self.learn_prompt(out)
        self._stream_rest(out)
        self.has_text = self.has_text and out.text is not None
        start = self.chain.num_generated
        self.chain.add(out.piece(replica, self.texts), piece.max_tokens)
        self.spans.append(PieceSpan(replica, start, start + len(out.token_ids),
                                    out.num_cached_tokens))
        self.expect_hit = self.prompt_tokens + start + len(out.token_ids)  # if it stays here

    def _stream_rest(self, out: PieceOutput) -> None:
        """Hand the sink the piece's tokens it did not stream (all of them where the runner
        does not stream)."""
        chars, self.streamed_chars = self.streamed_chars, None
        k, self.streamed_tokens = self.streamed_tokens, 0
        if self.sink is None or chars is None or k >= len(out.token_ids):
            return
        offs = out.text_offsets
        text = out.text or ""
        if k:  # streamed in part: the rest from its first unsent token
            text = text[offs[k] - offs[0]:] if offs is not None else text[chars:]
        self.sink(self.chain.num_generated + k, TokenDelta(
            out.token_ids[k:], text,
            out.logprobs[k:] if out.logprobs is not None else None,
            tuple(o - offs[k] for o in offs[k:]) if offs is not None else None,
            token_texts=out.token_texts[k:] if out.token_texts is not None else None,
            top_logprobs=out.top_logprobs[k:] if out.top_logprobs is not None else None))

    def restart(self) -> None:
        """Forget every piece (a turn that cannot be continued starts again from its prompt)."""
        while self.chain.pieces:
            self.chain.drop_last()
        self.spans.clear()
        self.has_text = True
        self.expect_hit = 0

    def response(self) -> Response:
        """The complete turn as one response (logprobs only where the caller asked)."""
        final = self.chain.final
        assert final is not None
        return (final if self.want_logprobs or final.logprobs is None
                else replace(final, logprobs=None))

    def result(self, placed: int, moved: bool, reason: str, prefill_tokens: int,
               ) -> TurnResult:
        final = self.response()
        return TurnResult(
            token_ids=tuple(final.token_ids or ()),
            text=final.text if self.has_text else None,
            logprobs=final.logprobs,
            finish_reason=final.finish_reason,
            pieces=tuple(self.spans),
            replica=placed,
            moved=moved,
            reason=reason,
            prefill_tokens=prefill_tokens,
            num_relocations=self.num_relocations,
            chain=tuple(self.chain.pieces),
            prompt_ids=self.chain.prompt_ids,
        )


def seam_sampling(sampling: SamplingParams) -> SamplingParams:
    """``sampling`` as its pieces are sent: a stop string across a seam needs each token's
    text offset, so logprobs (0) are asked for where they were not."""
    return replace(sampling, logprobs=0) if sampling.stop and sampling.logprobs is None else sampling
