"""One attempt of one group: each response a chain of pieces, all run by one loop.

Each response runs as its own loop of pieces (``runtime.chain``). A response's state is a
session turn's (``runtime.sessions.turn_chain.RunningTurn``: it builds each piece's request,
sends it watched and timed, and takes its output back), and its pieces go through the engine
seam the session gateway uses (``runtime.sessions.pieces.PieceRunner``; ``HttpPieceRunner``
owns the vLLM and SGLang wire formats, streaming, retries and aborts).

With ``ExecutorConfig.continuation`` a piece has at most ``piece_tokens`` tokens (the piece ends
are the seams where the router knows exactly what a response has generated), and between two
pieces a response can change replica:

- a move (``ChainedAttempt.move``, e.g. from a balancer): a streamed piece is cut now
  (``HttpPieceRunner.cut``) and an SGLang one aborted by id (``interrupt``), keeping what it
  generated; otherwise (vLLM, unstreamed) the move takes effect when the running piece ends,
  so nothing is dropped;
- a fault (``ReplicaDownError``, ``runtime.faults``, or a stall found by the stall watch;
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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from tailsieve.core.running_index import RunningIndex
from tailsieve.runtime.backends import PromptInput, Response
from tailsieve.runtime.chain import ResponseChain, check_continuable
from tailsieve.runtime.executor_config import ExecutorConfig, ForcedLength
from tailsieve.runtime.faults import ReplicaDownError, RequestError, refused
from tailsieve.runtime.sessions.http_runner import HttpPieceRunner
from tailsieve.runtime.sessions.pieces import PieceOutput, PieceRequest, TokenDelta
from tailsieve.runtime.sessions.profile import LiveProfile
from tailsieve.runtime.sessions.turn_chain import RunningTurn, TurnSink, seam_sampling
from tailsieve.runtime.stall_watch import StallWatch
from tailsieve.runtime.waste import AttemptProgress, LostPiece

MAX_EMPTY_ABORTS = 8  # pieces in a row the server aborted with no token, no move asked

Relocate = Callable[[Sequence[int], int, str, BaseException], int]
"""(samples, replica, url their piece was sent to, error) -> the replica they continue on."""


class RequestFailedError(RequestError):
    """A request error that retries could not fix (or that is not retryable); ``sample`` is
    the response whose request failed."""

    def __init__(self, message: str, status: int | None = None, sample: int = 0) -> None:
        super().__init__(message, status=status, retryable=False)
        self.sample = sample


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

    def _report(self, i: int) -> None:
        """Response ``i``'s piece ended (or it continues elsewhere): tell the index."""
        idx, rt = self._index, self.turns[i]
        if idx is None:
            return
        if rt.chain.done:
            idx.completed(self._key(i), self)
            return
        idx.piece_ended(self._key(i), rt.prefix_tokens, rt.prompt_tokens, self)
        idx.set_replica(self._key(i), rt.replica, self)

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
        parts = await _all_or_first_error(lanes)
        return [r for part in parts for r in part]

    def _sink(self, i: int) -> TurnSink:
        """Streaming: where response ``i`` (or, one request with ``n``, the response the
        tokens belong to) stands as its running piece streams."""

        def took(start: int, d: TokenDelta) -> None:
            j, live = i + d.sample, self.progress.live_tokens
            live[j] = (live.get(j, 0) if self._shared else start) + len(d.token_ids)
            if self._index is not None:
                p = self.turns[i].prompt_tokens
                self._index.set_known(self._key(i), p + live[j], p, self)

        return took

    def _begin(self, i: int, group: range, replica: int, cap: int, now: float) -> float:
        """Response ``i``'s next piece (for responses ``group``, at most ``cap`` tokens) is
        sent to ``replica`` at ``now``: the progress and the index are told; its start."""
        rt = self.turns[i]
        if rt.begin_piece(now) and rt.num_sent > 1:  # a move took effect
            self.num_moved_pieces += 1
            if self._index is not None:
                self._index.moved(self._key(i), self)
        for j in group:
            self.progress.started_s[j] = now
            if not self._cfg.stream:
                self.progress.caps[j] = cap
        if self._index is not None and not self._cfg.stream:
            self._index.piece_started(self._key(i), self, replica, now - self._t0,
                                      rt.cap_tokens)
        return now

    def _restart(self, group: range, replica: int, base: str, fault: ReplicaDownError,
                 span: tuple[float, float, int]) -> None:
        """Without continuation, responses ``group`` lost their piece (``span``: sent, ended,
        cap) to ``fault``: what they had generated is lost (counted where streamed, else
        estimated; nothing where the replica refused them), and they start again from the
        prompt where ``relocate`` names."""
        live = self.progress.live_tokens
        for j in group:
            if not refused(fault):
                self.progress.lost.append(LostPiece(j, *span, live.get(j, 0),
                                                    estimate=not self._cfg.stream))
            live.pop(j, None)
            self.turns[j].restart()
        new = self._relocate(group, replica, base, fault)
        for j in group:
            self.turns[j].replica = self.turns[j].booked = new

    async def _chain(self, i: int, n: int = 1) -> list[Response]:
        """Response ``i``'s loop of pieces (``n > 1``: each piece one request for responses
        ``i .. i + n - 1``); their responses."""
        rt = self.turns[i]
        chain = rt.chain
        group = range(i, i + n)
        pid = self._prompt.prompt_id
        if self._forced is not None and not chain.pieces:
            forced = max(self._forced(pid, j) for j in group)  # one request: the longest
            for j in group:
                self.turns[j].chain.max_tokens = forced
        runner = _OneRequest(self._runner) if n > 1 else self._runner
        progress, stream, cont = self.progress, self._cfg.stream, self._cfg.continuation
        empty_aborts = 0
        clock = asyncio.get_running_loop().time
        while not chain.done:
            replica = rt.replica
            target = self._target(replica)
            base = self._runner.endpoints[target]
            piece = rt.next_piece()
            if n > 1:
                piece = replace(piece, num_samples=n)
            cap = piece.max_tokens
            started = self._begin(i, group, replica, cap, clock())
            url = base + self._cfg.backend.path
            try:
                out, fault = await rt.send(piece, runner, target, self._stalls,
                                           self._timings, clock, base, url)
            except RequestError as exc:  # one retries could not fix fails the response
                raise RequestFailedError(f"{url} prompt {pid!r}: {exc}", status=exc.status,
                                         sample=i) from exc
            for j in group:  # (a cut keeps them: the running piece's waste is estimated)
                progress.started_s.pop(j, None)
                progress.caps.pop(j, None)
            ended = clock()
            outs = [out, *runner.rest] if isinstance(runner, _OneRequest) and out else [out]
            if not cont and fault is None and any(o.finish_reason == "abort" for o in outs
                                                  if o is not None):
                fault = ReplicaDownError(f"{url} prompt {pid!r} sample {i}: the server ended "
                                         "a response without a finish reason, or aborted it")
            if fault is not None and not cont:  # starts again from its prompt elsewhere
                self._restart(group, replica, base, fault, (started, ended, cap))
                continue
            if out is not None:
                rt.learn_prompt(out)
            kept = out is not None and (bool(out.token_ids) or (
                fault is None and out.finish_reason != "abort"))  # an empty cut: nothing
            dropped = 0
            if (out is not None and kept and chain.prompt_ids is None and out.token_ids
                    and (fault is not None or out.finish_reason == "abort")):
                dropped, kept = len(out.token_ids), False  # cannot be continued: starts again
            if out is not None and kept:
                for j, o in zip(group, outs, strict=True):
                    assert o is not None
                    self.turns[j].add(replica, piece, o)  # an interrupted one as "moved"
                    if not cont:  # the server's whole response, as it sent it
                        self.turns[j].chain.final = _whole(o)
                    if fault is None:
                        progress.timed_tokens += o.num_generated
                        progress.timed_s += ended - started
            if dropped or (fault is not None and not (stream or refused(fault))):
                # its tokens are decoded again: counted where streamed, else estimated
                progress.lost.append(LostPiece(i, started, ended, cap, dropped,
                                               estimate=not stream))
            if fault is not None:
                rt.replica = rt.booked = self._relocate((i,), replica, base, fault)
            elif out is not None and out.finish_reason == "abort" and not out.token_ids:
                empty_aborts += 1
                if empty_aborts >= MAX_EMPTY_ABORTS and rt.replica == replica:
                    raise RequestFailedError(f"{base} prompt {pid!r} sample {i}: "
                                             f"{empty_aborts} pieces in a row aborted by the "
                                             "server", sample=i)
            else:
                empty_aborts = 0
            progress.live_tokens[i] = chain.num_generated
            self._report(i)
        finals = [self.turns[j].response() for j in group]
        for j, final in zip(group, finals, strict=True):
            progress.num_finished += 1
            progress.finished_tokens += final.num_tokens
            progress.live_tokens.pop(j, None)
        return finals


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


def _whole(out: PieceOutput) -> Response:
    """A whole response's one piece as the response: the server's count where it sent no
    ids, the prompt ids it echoed and, streamed, its chunk timings."""
    return Response(
        text=out.text or "", num_tokens=out.num_generated, finish_reason=out.finish_reason,
        token_ids=tuple(out.token_ids) if out.num_tokens is None else None, logprobs=out.logprobs,
        text_offsets=out.text_offsets, prompt_token_ids=out.prompt_ids,
        chunk_times_s=out.chunk_times_s or None, chunk_tokens=out.chunk_tokens or None)


async def _all_or_first_error(
    calls: Sequence[Awaitable[list[Response]]],
) -> list[list[Response]]:
    """Await all; on the first error cancel the rest and raise it (a ``ReplicaDownError`` wins
    over other errors so a dead replica is never reported as a request failure). Cancelled
    itself, it cancels them all and reads their errors."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = [len(tasks)]

    def on_done(t: asyncio.Future[list[Response]]) -> None:
        left[0] -= 1
        if not waiter.done() and (left[0] == 0 or t.cancelled() or t.exception() is not None):
            waiter.set_result(None)

    try:
        for t in tasks:
            t.add_done_callback(on_done)
        if tasks:
            await waiter
        errors = [t.exception() for t in tasks if t.done() and t.exception() is not None]
        if errors:
            down = [e for e in errors if isinstance(e, ReplicaDownError)]
            raise (down or errors)[0]  # type: ignore[misc]
        return [t.result() for t in tasks]
    finally:
        running = [t for t in tasks if not t.done()]
        for t in running:
            t.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        for t in tasks:  # read, also when this call was cancelled first: not "never retrieved"
            if t.done() and not t.cancelled():
                t.exception()
