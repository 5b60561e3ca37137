"""One attempt of one group: each response a chain of pieces, run by the one piece loop.

Each response runs as its own loop of pieces (``runtime.execution.chain``): a session turn's state
(``runtime.execution.turn_chain.RunningTurn``: it builds each piece's request, sends it watched
and timed, and takes its output back) run by the loop a session gateway's turn runs by
(``runtime.execution.piece_loop.run_pieces``; ``_Lane`` is the step's side of it), its pieces
through the engine seam the session gateway uses (``runtime.engine.pieces.PieceRunner``;
``HttpPieceRunner`` owns the vLLM and SGLang wire formats, streaming, retries and aborts).

With ``ExecutorConfig.continuation`` a piece has at most ``piece_tokens`` tokens (the piece ends
are the seams where the router knows exactly what a response has generated), and between two
pieces a response can change replica:

- a move (``ChainedAttempt.move``, e.g. from a balancer): a streamed piece is cut now
  (``HttpPieceRunner.cut``) and an SGLang one aborted by id (``interrupt``), keeping what it
  generated; otherwise (vLLM, unstreamed) the move takes effect when the running piece ends,
  so nothing is dropped;
- a fault (``ReplicaDownError``, ``runtime.engine.faults``, or a stall found by the stall watch;
  streamed, the tokens it streamed are kept as a piece): the executor's ``relocate`` takes the
  replica out and names a healthy one; the response continues there from its last seam.

Without continuation each response is one piece (no seams, no moves, any sampling), and a fault
(or a response the server ended without a finish reason) restarts the response from its prompt
on the replica ``relocate`` names, its piece lost (``AttemptProgress.lost``). A group sent as
one request with ``n`` (``split_groups=False``, every response on one replica: the server
shares the prompt's prefill) is one loop whose pieces carry all ``n`` responses
(``HttpPieceRunner.run_samples``); a fault restarts the whole request elsewhere. Either way
the group's other responses keep running where they are. A request error that retries could
not fix (``RequestFailedError``) fails the step.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace

from tailsieve.core.running_index import RunningIndex
from tailsieve.runtime.engine.backends import PromptInput, Response
from tailsieve.runtime.engine.faults import (
    ReplicaDownError,
    RequestError,
    RequestFailedError,
    refused,
)
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest, TokenDelta
from tailsieve.runtime.execution.chain import ResponseChain, check_continuable
from tailsieve.runtime.execution.piece_loop import PieceOwner, run_pieces
from tailsieve.runtime.execution.profile import LiveProfile
from tailsieve.runtime.execution.stall_watch import StallWatch
from tailsieve.runtime.execution.turn_chain import RunningTurn, TurnSink, seam_sampling
from tailsieve.runtime.step.executor_config import ExecutorConfig, ForcedLength
from tailsieve.runtime.step.waste import AttemptProgress, LostPiece
from tailsieve.runtime.tasks import all_or_first_error

Relocate = Callable[[Sequence[int], int, str, BaseException], int]
"""(samples, replica, url their piece was sent to, error) -> the replica they continue on."""


class ChainedAttempt:
    """Runs one group as ``group_size`` chains through ``runner``; ``replicas[i]``: the plan
    replica response ``i`` starts on; ``targets[replica]``: the runner's replica for a plan
    replica (default: the same). ``turns[i]``: response ``i``'s running state (its
    ``replica``: where its next piece goes; its ``chain``: one of ``chains``, which outlive
    the attempt: the executor keeps them)."""

    def __init__(
        self,
        runner: HttpPieceRunner,
        replicas: Sequence[int],
        config: ExecutorConfig,
        prompt: PromptInput,
        chains: list[ResponseChain],
        forced_length: ForcedLength | None,
        progress: AttemptProgress,
        relocate: Relocate,
        stalls: StallWatch | None = None,
        targets: Sequence[int] | None = None,
        priority_bucket_tokens: int | None = None,
        timings: LiveProfile | None = None,
    ) -> None:
        if config.continuation:
            check_continuable(config.sampling)
        self._runner = runner
        self._stalls = stalls  # hung replicas: a piece without progress is a fault
        self._timings = timings  # the ``auto`` profile's fit, fed each piece's timing
        self._targets = targets
        self._cfg = config
        self._prompt = prompt
        self._forced = forced_length
        self.progress = progress
        self._relocate = relocate
        self.num_moved_pieces = 0  # pieces begun on another replica than the last one after a
        # move (moves that took effect; a response moved again before its piece ended counts
        # once)
        progress.streaming = config.stream
        self._shared = (not config.continuation and not config.split_groups
                        and len(chains) > 1 and len(set(replicas)) == 1)  # one request with n
        tag = uuid.uuid4().hex  # this attempt's pieces' request ids begin with it
        seed = config.sampling.seed if prompt.seed is None else prompt.seed
        sampling = [config.sampling if seed is None else replace(config.sampling, seed=seed + i)
                    for i in range(len(chains))]
        self.turns = [RunningTurn(
            (prompt.prompt_id, i), f"{tag}-{i}", prompt,
            seam_sampling(sampling[i]) if config.continuation else sampling[i],
            chain, replicas[i], config.piece_tokens, config.continuation,
            config.sampling.logprobs is not None, booked=replicas[i],
            sink=self._sink(i) if config.stream else None, forced=forced_length is not None,
            priority_bucket=priority_bucket_tokens, unique_ids=True, texts=False)
            for i, chain in enumerate(chains)]
        self._index: RunningIndex | None = None
        self._t0 = 0.0

    def attach(self, index: RunningIndex, t0: float, dealt: tuple[int, ...]) -> None:
        """Report this group's running responses to ``index`` from now on (as they start and
        end pieces, move and complete); ``t0``: the loop time the step began; ``dealt``: the
        plan replicas the group was dealt."""
        self._index, self._t0 = index, t0
        for i, rt in enumerate(self.turns):
            if rt.chain.final is None:
                index.add(self._key(i), rt.replica, rt.prefix_tokens, rt.prompt_tokens, dealt,
                          self)

    def _key(self, i: int) -> tuple[str, int]:
        return self._prompt.prompt_id, i

    def _target(self, replica: int) -> int:
        return replica if self._targets is None else self._targets[replica]

    def move(self, sample: int, replica: int) -> bool:
        """Continue response ``sample`` on ``replica``. Where the runner interrupts pieces
        (SGLang, or vLLM streamed) the running piece ends now and its tokens are kept;
        otherwise the move takes effect when the running piece ends, so nothing is dropped.
        False when the response is complete."""
        rt = self.turns[sample]
        if rt.chain.done:
            return False
        rt.replica = replica
        if self._index is not None:
            self._index.set_replica(self._key(sample), replica, self)
        if rt.piece_on is None or self._cfg.defers_moves:
            return True
        if self._cfg.stream:  # ended where it stands, every streamed token kept
            self._runner.cut(rt.piece_id)
        else:
            self._runner.interrupt(self._target(rt.piece_on), rt.piece_id)
        return True

    def running_piece(self, sample: int, now: float | None = None) -> tuple[int, float, int] | None:
        """``(replica, age_s, cap_tokens)`` of the unstreamed running piece of ``sample``: the
        replica it runs on, the seconds it has run and the most tokens it may add (its piece
        cap against the configured ``max_tokens``, never a forced length). None when streaming
        (the streamed tokens are known) or between pieces. ``now``: the loop's time, when the
        caller has it. What the live rebalancer needs to estimate where the response stands."""
        rt = self.turns[sample]
        if self._cfg.stream or rt.piece_on is None:
            return None
        if now is None:
            now = asyncio.get_running_loop().time()
        return rt.piece_on, now - rt.piece_started_s, rt.cap_tokens

    async def run(self) -> list[Response]:
        """The group's responses in sample order (each a joined chain)."""
        n = len(self.turns)
        lanes = [self._chain(0, n)] if self._shared else [self._chain(i) for i in range(n)]
        parts = await all_or_first_error(lanes)
        return [r for part in parts for r in part]

    def _sink(self, i: int) -> TurnSink:
        """Streaming: where response ``i`` (or, one request with ``n``, the response the
        tokens belong to) stands as its running piece streams."""

        def took(start: int, d: TokenDelta) -> None:
            j, live = i + d.sample, self.progress.live_tokens
            if not d.token_ids:  # asked with ids: a finish or role chunk; else one token
                if self._cfg.return_token_ids:
                    return
                live[j] = live.get(j, 0) + 1
            elif self._shared:
                live[j] = live.get(j, 0) + len(d.token_ids)
            else:
                live[j] = start + len(d.token_ids)
            if self._index is not None:
                p = self.turns[i].prompt_tokens
                self._index.set_known(self._key(i), p + live[j], p, self)

        return took

    async def _chain(self, i: int, n: int = 1) -> list[Response]:
        """Response ``i``'s loop of pieces (``n > 1``: each piece one request for responses
        ``i .. i + n - 1``); their responses."""
        group = range(i, i + n)
        if self._forced is not None and not self.turns[i].chain.pieces:
            forced = max(self._forced(self._prompt.prompt_id, j) for j in group)  # the longest
            for j in group:
                self.turns[j].chain.max_tokens = forced
        await run_pieces(self.turns[i], _Lane(self, i, n))
        finals = [self.turns[j].response() for j in group]
        for j, final in zip(group, finals, strict=True):
            self.progress.num_finished += 1
            self.progress.finished_tokens += final.num_tokens
            self.progress.live_tokens.pop(j, None)
        return finals


class _Lane(PieceOwner):
    """The step's side of response ``i``'s loop of pieces (``n > 1``: each piece one request
    for responses ``i .. i + n - 1``): the running index, the ``AttemptProgress`` (lost pieces
    included), relocation and the request errors that fail the step."""

    max_empty_aborts = 8

    def __init__(self, att: ChainedAttempt, i: int, n: int) -> None:
        self.att, self.i, self.group = att, i, range(i, i + n)
        self.pid = att._prompt.prompt_id
        one = _OneRequest(att._runner) if n > 1 else None
        self.runner = one or att._runner
        self.rest = one.others if one is not None else None  # the request's other responses
        self.clock = asyncio.get_running_loop().time
        self.ended_s = 0.0
        self.cap = 0
        self.base = self.url = ""  # where the running piece went
        self.outs: list[PieceOutput | None] = []  # its responses

    def begin(self, rt: RunningTurn, piece: PieceRequest) -> PieceRequest:
        """The progress and the index are told of the piece's start."""
        att, index, stream = self.att, self.att._index, self.att._cfg.stream
        if len(self.group) > 1:
            piece = replace(piece, num_samples=len(self.group))
        self.cap, started = piece.max_tokens, self.clock()
        if rt.begin_piece(started) and rt.num_sent > 1:  # a move took effect
            att.num_moved_pieces += 1
            if index is not None:
                index.moved(att._key(self.i), att)
        for j in self.group:
            att.progress.started_s[j] = started
            if not stream:
                att.progress.caps[j] = self.cap
        if index is not None and not stream:
            index.piece_started(att._key(self.i), att, rt.replica, started - att._t0,
                                rt.cap_tokens)
        return piece

    async def send(self, rt: RunningTurn, piece: PieceRequest, replica: int,
                   ) -> tuple[PieceOutput | None, ReplicaDownError | None]:
        att, runner = self.att, self.runner
        target = att._target(replica)
        self.base = att._runner.endpoints[target]
        self.url = self.base + att._cfg.backend.path
        try:
            return await rt.send(piece, runner, target, att._stalls, att._timings, self.clock,
                                 self.base, self.url, self.rest)
        except RequestError as exc:  # one retries could not fix fails the response
            raise RequestFailedError(f"{self.url} prompt {self.pid!r}: {exc}",
                                     status=exc.status, sample=self.i) from exc

    def ended(self, rt: RunningTurn, piece: PieceRequest, out: PieceOutput | None,
              fault: ReplicaDownError | None) -> ReplicaDownError | None:
        """Without continuation a response the server aborted (or ended without a finish
        reason) is a fault: it starts again."""
        progress = self.att.progress
        for j in self.group:  # (a cut keeps them: the running piece's waste is estimated)
            progress.started_s.pop(j, None)
            progress.caps.pop(j, None)
        self.ended_s = self.clock()
        self.outs = [out, *self.rest()] if self.rest is not None and out else [out]
        if (not self.att._cfg.continuation and fault is None
                and any(o.finish_reason == "abort" for o in self.outs if o is not None)):
            fault = ReplicaDownError(f"{self.url} prompt {self.pid!r} sample {self.i}: the "
                                     "server ended a response without a finish reason, or "
                                     "aborted it")
        return fault

    def continues(self, rt: RunningTurn) -> bool:
        return self.att._cfg.continuation

    def take(self, rt: RunningTurn, replica: int, piece: PieceRequest, out: PieceOutput,
             fault: ReplicaDownError | None) -> None:
        att = self.att
        for j, o in zip(self.group, self.outs, strict=True):
            assert o is not None
            att.turns[j].add(replica, piece, o)  # an interrupted one as "moved"
            if not att._cfg.continuation:  # the server's whole response, as it sent it
                chain = att.turns[j].chain
                chain.final = _whole(o, chain.pieces[-1].token_ids)
            if fault is None:
                att.progress.timed_tokens += o.num_generated
                att.progress.timed_s += self.ended_s - rt.piece_started_s

    def lost(self, rt: RunningTurn, fault: ReplicaDownError | None, dropped: int) -> None:
        """Its tokens are decoded again: counted where streamed, else estimated (nothing
        where the replica refused the piece)."""
        stream = self.att._cfg.stream
        if dropped or (fault is not None and not (stream or refused(fault))):
            self.att.progress.lost.append(LostPiece(self.i, rt.piece_started_s, self.ended_s,
                                                    self.cap, dropped, estimate=not stream))

    async def relocate(self, rt: RunningTurn, replica: int, fault: ReplicaDownError,
                       restart: bool) -> None:
        """Restarted (without continuation), what the lane's responses had generated is lost
        (as in ``lost``, one entry each), and they all start again where ``relocate`` names."""
        att = self.att
        group: tuple[int, ...] = (self.i,)
        if restart:
            group = tuple(self.group)
            live, stream = att.progress.live_tokens, att._cfg.stream
            for j in group:
                if not refused(fault):
                    att.progress.lost.append(LostPiece(j, rt.piece_started_s, self.ended_s,
                                                       self.cap, live.get(j, 0),
                                                       estimate=not stream))
                live.pop(j, None)
                att.turns[j].restart()
        new = att._relocate(group, replica, self.base, fault)
        for j in group:
            att.turns[j].replica = att.turns[j].booked = new
        if not restart:
            self.after(rt)

    def aborted(self, rt: RunningTurn, replica: int) -> Exception:
        return RequestFailedError(f"{self.base} prompt {self.pid!r} sample {self.i}: "
                                  f"{rt.empty_aborts} pieces in a row aborted by the server",
                                  sample=self.i)

    def after(self, rt: RunningTurn) -> None:
        """The piece ended (or the response continues elsewhere): the index is told."""
        att, index = self.att, self.att._index
        att.progress.live_tokens[self.i] = rt.chain.num_generated
        if index is None:
            return
        key = att._key(self.i)
        if rt.chain.done:
            index.completed(key, att)
            return
        index.piece_ended(key, rt.prefix_tokens, rt.prompt_tokens, att)
        index.set_replica(key, rt.replica, att)


class _OneRequest:
    """A runner for a group sent as one request with ``n`` (``PieceRequest.num_samples``):
    the piece's first response is its output, the others wait in ``rest``; the stall watch
    reads and cuts the request as the runner's own."""

    def __init__(self, runner: HttpPieceRunner) -> None:
        self._runner = runner
        self.rest: list[PieceOutput] = []
        self.generated_tokens = runner.generated_tokens
        self.cut = runner.cut

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        self.rest = []
        first, *self.rest = await self._runner.run_samples(replica, piece)
        return first

    def others(self) -> list[PieceOutput]:
        """The last piece's responses after its first."""
        return self.rest


def _whole(out: PieceOutput, ids: tuple[int, ...]) -> Response:
    """A whole response's one piece (its token ids as the chain keeps them: ``ids``) as the
    response: the server's count where it sent no ids, the prompt ids it echoed and,
    streamed, its chunk timings."""
    return Response(
        text=out.text or "", num_tokens=out.num_generated, finish_reason=out.finish_reason,
        token_ids=ids if out.num_tokens is None else None, logprobs=out.logprobs,
        text_offsets=out.text_offsets, prompt_token_ids=out.prompt_ids,
        chunk_times_s=out.chunk_times_s or None, chunk_tokens=out.chunk_tokens or None)
