"""One group whose responses are chains of pieces (``ExecutorConfig.continuation``).

Each response runs as its own loop of pieces (``runtime.chain``): at most ``piece_tokens``
tokens each (the piece ends are the seams where the router knows exactly what a response has
generated). Pieces go through the engine seam the session gateway uses
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

from tailsieve.core.drain import engine_priority
from tailsieve.runtime.attempt import (
    AttemptProgress,
    ExecutorConfig,
    ForcedLength,
    LostPiece,
    RequestFailedError,
    _all_or_first_error,
)
from tailsieve.runtime.backends import PromptInput, Response, SamplingParams
from tailsieve.runtime.chain import ResponseChain, check_continuable
from tailsieve.runtime.faults import ReplicaDownError, RequestError, refused
from tailsieve.runtime.running_index import RunningIndex
from tailsieve.runtime.sessions.http_runner import HttpPieceRunner
from tailsieve.runtime.sessions.pieces import PieceOutput, PieceRequest, TokenDelta
from tailsieve.runtime.sessions.profile import LiveProfile
from tailsieve.runtime.stall_watch import StallWatch

MAX_EMPTY_ABORTS = 8  # pieces in a row the server aborted with no token, no move asked

Relocate = Callable[[int, int, str, BaseException], tuple[int, str]]
"""(sample, replica, url the piece was sent to, error) -> (new replica, its base URL)."""


class ChainedAttempt:
    """Runs one group as ``group_size`` chains through ``runner``; ``where[i]`` = (replica,
    base URL) of response ``i``; ``targets[replica]``: the runner's replica for a plan replica
    (default: the same). ``chains`` outlive the attempt (the executor keeps them)."""

    def __init__(
        self,
        runner: HttpPieceRunner,
        where: list[tuple[int, str]],
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
        self._priority_bucket = priority_bucket_tokens  # each piece's engine priority by the
        # tokens its response generated so far (core.drain.engine_priority); None: not sent
        self._runner = runner
        self._stalls = stalls  # hung replicas: a piece without progress is a fault
        self._timings = timings  # the ``auto`` profile's fit, fed each piece's timing
        self._targets = targets
        self.where = list(where)
        self._cfg = config
        self._prompt = prompt
        self.chains = chains
        self._forced = forced_length
        self.progress = progress
        self._relocate = relocate
        self._rids: dict[int, str] = {}  # request id of each running piece
        self._streamed: dict[int, int] = {}  # tokens each running piece streamed so far
        self._started: dict[int, float] = {}  # loop time the running piece of a response began
        self._piece_replica: dict[int, int] = {}  # plan replica of each running piece
        self._num_pieces = [0] * len(chains)  # pieces sent per response (names them)
        self._tag = uuid.uuid4().hex  # this attempt's pieces' request ids begin with it
        self.num_moved_pieces = 0  # pieces begun on another replica than the last one after a
        # move (moves that took effect; a response moved again before its piece ended counts
        # once)
        progress.streaming = config.stream
        self.down_sample = 0
        # stop strings across a seam need each token's text offset: ask for logprobs
        self._sampling = config.sampling
        if config.sampling.stop and config.sampling.logprobs is None:
            self._sampling = replace(config.sampling, logprobs=0)
        self._index: RunningIndex | None = None
        self._t0 = 0.0

    def attach(self, index: RunningIndex, t0: float, dealt: tuple[int, ...]) -> None:
        """Report this group's running responses to ``index`` from now on (as they start and
        end pieces, move and complete); ``t0``: the loop time the step began; ``dealt``: the
        plan replicas the group was dealt."""
        self._index, self._t0 = index, t0
        pid = self._prompt.prompt_id
        for i, chain in enumerate(self.chains):
            if chain.final is None:
                p = self.prompt_tokens(i)
                index.add((pid, i), self.where[i][0], p + chain.num_generated, p, dealt, self)

    def _report(self, i: int) -> None:
        """Response ``i``'s piece ended (or it continues elsewhere): tell the index."""
        idx = self._index
        if idx is None:
            return
        key = (self._prompt.prompt_id, i)
        chain = self.chains[i]
        if chain.done:
            idx.completed(key, self)
            return
        p = self.prompt_tokens(i)
        idx.piece_ended(key, p + chain.num_generated, p, self)
        idx.set_replica(key, self.where[i][0], self)

    def _target(self, replica: int) -> int:
        return replica if self._targets is None else self._targets[replica]

    def move(self, sample: int, replica: int, base_url: str) -> bool:
        """Continue response ``sample`` on ``replica``. Where the runner interrupts pieces
        (SGLang, or vLLM streamed) the running piece ends now and its tokens are kept;
        otherwise the move takes effect when the running piece ends, so nothing is dropped.
        False when the response is complete."""
        if self.chains[sample].done:
            return False
        self.where[sample] = (replica, base_url.rstrip("/"))
        if self._index is not None:
            self._index.set_replica((self._prompt.prompt_id, sample), replica, self)
        rid = self._rids.get(sample)
        if rid is None or self._cfg.defers_moves:
            return True
        if self._cfg.stream:  # ended where it stands, every streamed token kept
            self._runner.cut(rid)
        else:
            self._runner.interrupt(self._target(self._piece_replica[sample]), rid)
        return True

    def streamed_tokens(self, sample: int) -> int:
        """Tokens the running piece of response ``sample`` has streamed so far (0 unstreamed)."""
        return self._streamed.get(sample, 0)

    def prompt_tokens(self, sample: int) -> int:
        """Prompt tokens of response ``sample`` as far as known (0 before a server echoed a
        text prompt's ids)."""
        return len(self.chains[sample].prompt_ids or ())

    def running_piece(self, sample: int, now: float | None = None) -> tuple[int, float, int] | None:
        """``(replica, age_s, cap_tokens)`` of the unstreamed running piece of ``sample``: the
        replica it runs on, the seconds it has run and the most tokens it may add (its piece
        cap against the configured ``max_tokens``, never a forced length). None when streaming
        (the streamed tokens are known) or between pieces. ``now``: the loop's time, when the
        caller has it. What the live rebalancer needs to estimate where the response stands."""
        if self._cfg.stream or sample not in self._rids:
            return None
        if now is None:
            now = asyncio.get_running_loop().time()
        return (self._piece_replica.get(sample, self.where[sample][0]),
                now - self._started.get(sample, now), _piece_cap(self._cfg, self.chains[sample]))

    async def run(self) -> list[Response]:
        """The group's responses in sample order (each a joined chain)."""
        parts = await _all_or_first_error([self._chain(i) for i in range(len(self.chains))])
        return [r for part in parts for r in part]

    def _response_sampling(self, i: int) -> SamplingParams:
        """Response ``i``'s sampling: its seed is the prompt's (else the config's) plus ``i``."""
        seed = self._cfg.sampling.seed if self._prompt.seed is None else self._prompt.seed
        return self._sampling if seed is None else replace(self._sampling, seed=seed + i)

    def _request(self, i: int, cap: int, sp: SamplingParams) -> PieceRequest:
        """The next piece of response ``i`` (sampled under ``sp``): its prompt (text for a
        first piece whose ids are unknown) plus every token generated so far."""
        chain = self.chains[i]
        if "min_tokens" in sp.extra:
            sp = chain.piece_sampling(sp, self._cfg.piece_tokens)
        rid = f"{self._tag}-{i}-{self._num_pieces[i]}"
        self._num_pieces[i] += 1
        if chain.pieces or chain.prompt_ids is not None:
            prompt = chain.next_prompt(self._prompt) if chain.pieces else self._prompt
            ids = prompt.token_ids or chain.prompt_ids
            assert ids is not None
            text = None
        else:
            ids, text = (), self._prompt.text
        return PieceRequest(
            prompt_ids=ids, sampling=sp, max_tokens=cap, request_id=rid,
            prompt_json=getattr(ids, "json", None), prompt_text=text,
            forced=self._forced is not None,
            sink=self._sink(i) if self._cfg.stream else None,
            priority=None if self._priority_bucket is None
            else engine_priority(chain.num_generated, self._priority_bucket))

    def _sink(self, i: int) -> Callable[[TokenDelta], None]:
        """Streaming: counts what the running piece of response ``i`` streamed."""
        key = (self._prompt.prompt_id, i)
        chain = self.chains[i]

        def took(d: TokenDelta) -> None:
            n = self._streamed[i] = self._streamed.get(i, 0) + len(d.token_ids)
            done = chain.num_generated + n
            self.progress.live_tokens[i] = done
            if self._index is not None:
                p = self.prompt_tokens(i)
                self._index.set_known(key, p + done, p, self)

        return took

    async def _chain(self, i: int) -> list[Response]:
        chain = self.chains[i]
        pid = self._prompt.prompt_id
        if self._forced is not None and not chain.pieces:
            chain.max_tokens = self._forced(pid, i)
        relocated = False  # the last piece ended in a fault (its next replica is no move)
        empty_aborts = 0
        sampling = self._response_sampling(i)
        clock = asyncio.get_running_loop().time
        while not chain.done:
            replica = self.where[i][0]
            target = self._target(replica)
            base = self._runner.endpoints[target]
            cap = chain.piece_cap(self._cfg.piece_tokens)
            piece = self._request(i, cap, sampling)
            prev = self._piece_replica.get(i)
            if prev is not None and prev != replica and not relocated:
                self.num_moved_pieces += 1
                if self._index is not None:
                    self._index.moved((pid, i), self)
            relocated = False
            self._piece_replica[i] = replica
            self._rids[i] = piece.request_id
            started = self._started[i] = self.progress.started_s[i] = clock()
            if not self._cfg.stream:
                self.progress.caps[i] = cap
            if self._index is not None and not self._cfg.stream:
                self._index.piece_started((pid, i), self, replica, started - self._t0,
                                          _piece_cap(self._cfg, chain))
            timings, out, fault = self._timings, None, None
            timed = timings.time_piece(base, started, piece) if timings is not None else None
            try:
                out, fault = await self._run_piece(target, base, piece)
            finally:
                if timings is not None:
                    timings.record_piece(timed, started, clock(),
                                         [out] if out is not None and fault is None else None)
                self._rids.pop(i, None)
                self._streamed.pop(i, None)
                self.progress.started_s.pop(i, None)
                self.progress.caps.pop(i, None)
            ended = clock()
            if out is not None and chain.prompt_ids is None:
                chain.prompt_ids = out.prompt_ids or self._prompt.token_ids
            kept = out is not None and (bool(out.token_ids) or (
                fault is None and out.finish_reason != "abort"))  # an empty cut: nothing
            dropped = 0
            if (out is not None and kept and chain.prompt_ids is None and out.token_ids
                    and (fault is not None or out.finish_reason == "abort")):
                dropped, kept = len(out.token_ids), False  # cannot be continued: starts again
            if out is not None and kept:
                chain.add(out.piece(replica, texts=False), cap)  # an interrupted one as "moved"
                if fault is None:
                    self.progress.timed_tokens += len(out.token_ids)
                    self.progress.timed_s += ended - started
            if dropped or (fault is not None and not (self._cfg.stream or refused(fault))):
                # its tokens are decoded again: counted where streamed, else estimated
                self.progress.lost.append(LostPiece(i, started, ended, cap, dropped,
                                                    estimate=not self._cfg.stream))
            if fault is not None:
                self.down_sample = i
                self.where[i] = self._relocate(i, replica, base, fault)
                relocated = True
            elif out is not None and out.finish_reason == "abort" and not out.token_ids:
                empty_aborts += 1
                if empty_aborts >= MAX_EMPTY_ABORTS and self.where[i][0] == replica:
                    raise RequestFailedError(f"{base} prompt {pid!r} sample {i}: "
                                             f"{empty_aborts} pieces in a row aborted by the "
                                             "server", sample=i)
            else:
                empty_aborts = 0
            self.progress.live_tokens[i] = chain.num_generated
            self._report(i)
        final = chain.final
        assert final is not None
        if self._sampling is not self._cfg.sampling:
            final = replace(final, logprobs=None)  # asked only for the text offsets
        self.progress.num_finished += 1
        self.progress.finished_tokens += final.num_tokens
        self.progress.live_tokens.pop(i, None)
        return [final]

    async def _run_piece(self, target: int, base: str, piece: PieceRequest,
                         ) -> tuple[PieceOutput | None, ReplicaDownError | None]:
        """One piece through the runner, under the stall watch when there is one; a request
        error retries could not fix fails the response (``RequestFailedError``)."""
        url = base + self._cfg.backend.path
        try:
            if self._stalls is None:
                try:
                    return await self._runner.run_piece(target, piece), None
                except ReplicaDownError as exc:
                    return exc.partial, exc
            return await self._stalls.piece(self._runner, target, piece, url)
        except RequestError as exc:
            if isinstance(exc, ReplicaDownError):
                raise
            raise RequestFailedError(f"{url} prompt {self._prompt.prompt_id!r}: {exc}",
                                     status=exc.status) from exc


def _piece_cap(cfg: ExecutorConfig, chain: ResponseChain) -> int:
    """The most tokens a chain's next piece may add: the configured ``max_tokens`` less what
    it generated, at most ``piece_tokens`` (never a forced length)."""
    cap = cfg.sampling.max_tokens - chain.num_generated
    if cfg.piece_tokens is not None:
        cap = min(cap, cfg.piece_tokens)
    return max(cap, 0)
