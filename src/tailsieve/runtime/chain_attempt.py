"""One group whose responses are chains of pieces (``ExecutorConfig.continuation``).

Each response runs as its own loop of pieces (``runtime.chain``): at most ``piece_tokens``
tokens each (the piece ends are the seams where the router knows exactly what a response has
generated). A response's state is a session turn's (``runtime.sessions.turn_chain.RunningTurn``:
it builds each piece's request, sends it watched and timed, and takes its output back), and
its pieces go through the engine seam the session gateway uses
(``runtime.sessions.pieces.PieceRunner``; ``HttpPieceRunner`` owns the vLLM and SGLang wire
formats, streaming, retries and aborts). Between two pieces a response can change replica:

- a move (``ChainedAttempt.move``, e.g. from a balancer): a streamed piece is cut now
  (``HttpPieceRunner.cut``) and an SGLang one aborted by id (``interrupt``), keeping what it
  generated; otherwise (vLLM, unstreamed) the move takes effect when the running piece ends,
  so nothing is dropped;
- a fault (``ReplicaDownError``, ``runtime.faults``, or a stall found by the stall watch;
  streamed, the tokens it streamed are kept as a piece): the executor's ``relocate`` takes the
  replica out and names a healthy one; the response continues there from its last seam. The
  group's other responses keep running where they are.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace

from tailsieve.core.running_index import RunningIndex
from tailsieve.runtime.attempt import (
    AttemptProgress,
    ExecutorConfig,
    ForcedLength,
    LostPiece,
    RequestFailedError,
    _all_or_first_error,
)
from tailsieve.runtime.backends import PromptInput, Response
from tailsieve.runtime.chain import ResponseChain, check_continuable
from tailsieve.runtime.faults import ReplicaDownError, RequestError, refused
from tailsieve.runtime.sessions.http_runner import HttpPieceRunner
from tailsieve.runtime.sessions.pieces import TokenDelta
from tailsieve.runtime.sessions.profile import LiveProfile
from tailsieve.runtime.sessions.turn_chain import RunningTurn, TurnSink, seam_sampling
from tailsieve.runtime.stall_watch import StallWatch

MAX_EMPTY_ABORTS = 8  # pieces in a row the server aborted with no token, no move asked

Relocate = Callable[[int, int, str, BaseException], int]
"""(sample, replica, url the piece was sent to, error) -> the replica it continues on."""


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
        self.down_sample = 0
        tag = uuid.uuid4().hex  # this attempt's pieces' request ids begin with it
        seed = config.sampling.seed if prompt.seed is None else prompt.seed
        self.turns = [RunningTurn(
            (prompt.prompt_id, i), f"{tag}-{i}", prompt,
            seam_sampling(config.sampling if seed is None
                          else replace(config.sampling, seed=seed + i)),
            chain, replicas[i], config.piece_tokens, True,
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
        parts = await _all_or_first_error([self._chain(i) for i in range(len(self.turns))])
        return [r for part in parts for r in part]

    def _sink(self, i: int) -> TurnSink:
        """Streaming: where response ``i`` stands as its running piece streams."""

        def took(start: int, d: TokenDelta) -> None:
            done = self.progress.live_tokens[i] = start + len(d.token_ids)
            if self._index is not None:
                rt = self.turns[i]
                p = rt.prompt_tokens
                self._index.set_known(self._key(i), p + done, p, self)

        return took

    async def _chain(self, i: int) -> list[Response]:
        rt = self.turns[i]
        chain = rt.chain
        pid = self._prompt.prompt_id
        if self._forced is not None and not chain.pieces:
            chain.max_tokens = self._forced(pid, i)
        empty_aborts = 0
        clock = asyncio.get_running_loop().time
        while not chain.done:
            replica = rt.replica
            target = self._target(replica)
            base = self._runner.endpoints[target]
            piece = rt.next_piece()
            cap = piece.max_tokens
            if rt.begin_piece(clock()) and rt.num_sent > 1:  # a move took effect
                self.num_moved_pieces += 1
                if self._index is not None:
                    self._index.moved(self._key(i), self)
            started = self.progress.started_s[i] = rt.piece_started_s
            if not self._cfg.stream:
                self.progress.caps[i] = cap
                if self._index is not None:
                    self._index.piece_started(self._key(i), self, replica, started - self._t0,
                                              rt.cap_tokens)
            url = base + self._cfg.backend.path
            try:
                out, fault = await rt.send(piece, self._runner, target, self._stalls,
                                           self._timings, clock, base, url)
            except RequestError as exc:  # one retries could not fix fails the response
                if isinstance(exc, ReplicaDownError):
                    raise
                raise RequestFailedError(f"{url} prompt {pid!r}: {exc}",
                                         status=exc.status) from exc
            finally:
                self.progress.started_s.pop(i, None)
                self.progress.caps.pop(i, None)
            ended = clock()
            if out is not None:
                rt.learn_prompt(out)
            kept = out is not None and (bool(out.token_ids) or (
                fault is None and out.finish_reason != "abort"))  # an empty cut: nothing
            dropped = 0
            if (out is not None and kept and chain.prompt_ids is None and out.token_ids
                    and (fault is not None or out.finish_reason == "abort")):
                dropped, kept = len(out.token_ids), False  # cannot be continued: starts again
            if out is not None and kept:
                rt.add(replica, piece, out)  # an interrupted one as "moved"
                if fault is None:
                    self.progress.timed_tokens += len(out.token_ids)
                    self.progress.timed_s += ended - started
            if dropped or (fault is not None and not (self._cfg.stream or refused(fault))):
                # its tokens are decoded again: counted where streamed, else estimated
                self.progress.lost.append(LostPiece(i, started, ended, cap, dropped,
                                                    estimate=not self._cfg.stream))
            if fault is not None:
                self.down_sample = i
                rt.replica = rt.booked = self._relocate(i, replica, base, fault)
            elif out is not None and out.finish_reason == "abort" and not out.token_ids:
                empty_aborts += 1
                if empty_aborts >= MAX_EMPTY_ABORTS and rt.replica == replica:
                    raise RequestFailedError(f"{base} prompt {pid!r} sample {i}: "
                                             f"{empty_aborts} pieces in a row aborted by the "
                                             "server", sample=i)
            else:
                empty_aborts = 0
            self.progress.live_tokens[i] = chain.num_generated
            self._report(i)
        final = rt.response()
        self.progress.num_finished += 1
        self.progress.finished_tokens += final.num_tokens
        self.progress.live_tokens.pop(i, None)
        return [final]
