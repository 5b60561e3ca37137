"""One group whose responses are chains of pieces (``ExecutorConfig.continuation``).

Each response runs as its own loop of pieces (``runtime.chain``): one request per piece, at
most ``piece_tokens`` tokens each (the piece ends are the seams where the router knows exactly
what a response has generated). Between two pieces a response can change replica:

- a move (``ChainedAttempt.move``, e.g. from a balancer): the running piece is aborted; with
  streaming the tokens it streamed are kept as a piece; on SGLang the piece is aborted by id
  (``/abort_request``) and returns its partial output, which is kept; otherwise they are
  dropped and generated again on the destination (at most ``piece_tokens`` of them);
- a fault (``ReplicaDownError``, ``runtime.faults``; streamed, the tokens it streamed are kept
  as a piece): the executor's ``relocate`` takes the replica out and names a
  healthy one; the response continues there from its last seam. The group's other responses
  keep running where they are.

A request error is retried with backoff as in ``GroupAttempt``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tailsieve.runtime.attempt import (
    AttemptProgress,
    ExecutorConfig,
    ForcedLength,
    LostPiece,
    RequestFailedError,
    _all_or_first_error,
    _chunk_items,
)
from tailsieve.runtime.backends import (
    Backend,
    PromptInput,
    Response,
    build_request,
    parse_response,
)
from tailsieve.runtime.chain import Piece, ResponseChain, check_continuable
from tailsieve.runtime.faults import ReplicaDownError, RequestError, check_finished, refused
from tailsieve.runtime.running_index import RunningIndex
from tailsieve.runtime.stall_watch import StallWatch
from tailsieve.runtime.transport import JSON, Transport

ABORT_WAIT_S = 2.0  # how long a move waits for SGLang's aborted piece to return its output

Relocate = Callable[[int, int, str, BaseException], tuple[int, str]]
"""(sample, replica, url the piece was sent to, error) -> (new replica, its base URL)."""


@dataclass(slots=True)
class _Partial:
    """What a streamed piece has delivered so far."""

    ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # text offset of one-token chunks
    num_chars: int = 0
    reason: str = ""
    prompt_ids: tuple[int, ...] | None = None

    def piece(self, replica: int, reason: str) -> Response:
        lps = tuple(self.logprobs) if len(self.logprobs) == len(self.ids) else None
        return Response(
            text="".join(self.texts),
            num_tokens=len(self.ids),
            finish_reason=self.reason or reason,
            token_ids=tuple(self.ids),
            logprobs=lps,
            text_offsets=tuple(self.offsets) if len(self.offsets) == len(self.ids) else None,
            prompt_token_ids=self.prompt_ids,
        )


@dataclass(slots=True)
class ChainStats:
    """Seams and losses of one attempt (read by the executor and benchmarks)."""

    num_pieces: int = 0
    num_moves: int = 0
    num_moved_pieces: int = 0  # pieces begun on another replica than the last one after a move
    # (moves that took effect; a response moved again before its piece ended counts once)
    num_relocations: int = 0  # continued elsewhere after a fault
    num_lost_pieces: int = 0  # pieces aborted before their end whose tokens were dropped
    lost_tokens: int = 0  # tokens known to be dropped (streamed, or counted by the server)


class ChainedAttempt:
    """Runs one group as ``group_size`` chains; ``where[i]`` = (replica, base URL) of response
    ``i``. ``chains`` outlive the attempt (the executor keeps them)."""

    def __init__(
        self,
        transport: Transport,
        where: list[tuple[int, str]],
        config: ExecutorConfig,
        prompt: PromptInput,
        chains: list[ResponseChain],
        forced_length: ForcedLength | None,
        progress: AttemptProgress,
        relocate: Relocate,
        stalls: StallWatch | None = None,
    ) -> None:
        check_continuable(config.sampling)
        self._stalls = stalls  # hung replicas: a piece without progress is a fault
        self._t = transport
        self.where = list(where)
        self._cfg = config
        self._prompt = prompt
        self.chains = chains
        self._forced = forced_length
        self.progress = progress
        self._relocate = relocate
        self._inflight: dict[int, asyncio.Future[Response]] = {}
        self._partial: dict[int, _Partial] = {}
        self._started: dict[int, float] = {}  # loop time the running piece of a response began
        self._rids: dict[int, str] = {}  # SGLang request id of each running piece
        self._piece_base: dict[int, str] = {}  # base URL of each running piece
        self._piece_replica: dict[int, int] = {}  # plan replica of each running piece
        self._moving: set[int] = set()  # SGLang pieces aborted by a move (partial kept)
        self._aborts: set[asyncio.Future[None]] = set()
        self.stats = ChainStats()
        progress.streaming = config.stream
        self.down_sample = 0
        # stop strings across a seam need each token's text offset: ask vLLM for logprobs
        self._want_offsets = bool(config.sampling.stop) and config.backend is Backend.VLLM
        self._sampling = config.sampling
        if self._want_offsets and config.sampling.logprobs is None:
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

    def move(self, sample: int, replica: int, base_url: str) -> bool:
        """Continue response ``sample`` on ``replica``. Streamed, its running piece is aborted
        now (the streamed tokens are kept); on SGLang it is aborted by id and returns its
        partial output; otherwise (vLLM, unstreamed pieces) the move takes effect when the
        running piece ends, so nothing is dropped. False when the response is complete."""
        if self.chains[sample].done:
            return False
        self.where[sample] = (replica, base_url.rstrip("/"))
        self.stats.num_moves += 1
        if self._index is not None:
            self._index.set_replica((self._prompt.prompt_id, sample), replica, self)
        req = self._inflight.get(sample)
        if req is None or req.done() or self._cfg.defers_moves:
            return True
        rid = self._rids.get(sample)
        if self._cfg.backend is Backend.SGLANG and not self._cfg.stream and rid is not None:
            # SGLang's /abort_request makes the running request return its partial output
            self._moving.add(sample)
            task = asyncio.ensure_future(self._abort_or_cancel(sample, req, rid))
            self._aborts.add(task)
            task.add_done_callback(self._aborts.discard)
        else:
            req.cancel()
        return True

    def streamed_tokens(self, sample: int) -> int:
        """Tokens the running piece of response ``sample`` has streamed so far (0 unstreamed)."""
        part = self._partial.get(sample)
        return len(part.ids) if part is not None else 0

    def prompt_tokens(self, sample: int) -> int:
        """Prompt tokens of response ``sample`` as far as known (its chain's prompt ids, else
        those its running stream echoed; 0 before either)."""
        ids = self.chains[sample].prompt_ids
        if ids is None:
            part = self._partial.get(sample)
            ids = part.prompt_ids if part is not None else None
        return len(ids or ())

    def running_piece(self, sample: int, now: float | None = None) -> tuple[int, float, int] | None:
        """``(replica, age_s, cap_tokens)`` of the unstreamed running piece of ``sample``: the
        replica it runs on, the seconds it has run and the most tokens it may add (its piece
        cap against the configured ``max_tokens``, never a forced length). None when streaming
        (the streamed tokens are known) or between pieces. ``now``: the loop's time, when the
        caller has it. What the live rebalancer needs to estimate where the response stands."""
        if self._cfg.stream or sample not in self._inflight:
            return None
        if now is None:
            now = asyncio.get_running_loop().time()
        return (self._piece_replica.get(sample, self.where[sample][0]),
                now - self._started.get(sample, now), _piece_cap(self._cfg, self.chains[sample]))

    async def _abort_or_cancel(self, sample: int, req: asyncio.Future[Response], rid: str) -> None:
        """Abort by id and let the piece return its partial output; cancel it (dropping its
        tokens) if that does not happen within ``ABORT_WAIT_S``."""
        url = self.where_url(sample, req)
        try:
            with contextlib.suppress(Exception):  # the piece is cancelled below if it failed
                async with asyncio.timeout(ABORT_WAIT_S):  # (wait_for can lose a cancel on 3.11)
                    await self._t.post_json(url, {"rid": rid}, ABORT_WAIT_S)
            await asyncio.wait({req}, timeout=ABORT_WAIT_S)  # raises only if cancelled
        finally:
            if not req.done():
                req.cancel()

    def _abort_sglang(self, sample: int) -> None:
        """SGLang notices a closed connection only at its next disconnect check: abort the
        cancelled piece by id too (best effort, in the background)."""
        rid = self._rids.get(sample)
        if self._cfg.backend is not Backend.SGLANG or rid is None:
            return
        url = self._piece_base.get(sample, self.where[sample][1]) + "/abort_request"
        task = asyncio.ensure_future(
            asyncio.wait_for(self._t.post_json(url, {"rid": rid}, ABORT_WAIT_S), ABORT_WAIT_S)
        )
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    def where_url(self, sample: int, req: asyncio.Future[Response]) -> str:
        """The /abort_request URL of the server running ``req`` (its piece's base URL)."""
        return self._piece_base.get(sample, self.where[sample][1]) + "/abort_request"

    async def run(self) -> list[Response]:
        """The group's responses in sample order (each a joined chain)."""
        parts = await _all_or_first_error([self._chain(i) for i in range(len(self.chains))])
        return [r for part in parts for r in part]

    async def _chain(self, i: int) -> list[Response]:
        chain = self.chains[i]
        pid = self._prompt.prompt_id
        seed = self._cfg.sampling.seed if self._prompt.seed is None else self._prompt.seed
        if self._forced is not None and not chain.pieces:
            chain.max_tokens = self._forced(pid, i)
        relocated = False  # the last piece ended in a fault (its next replica is no move)
        while not chain.done:
            replica, base = self.where[i]
            url = base + self._cfg.backend.path
            cap = chain.piece_cap(self._cfg.piece_tokens)
            sp = self._sampling
            if "min_tokens" in sp.extra:
                sp = chain.piece_sampling(sp, self._cfg.piece_tokens)
            body = build_request(
                self._cfg.backend,
                self._cfg.model or "",
                chain.next_prompt(self._prompt),
                sp,
                1,
                forced_tokens=cap if self._forced is not None else None,
                seed=seed + i if seed is not None else None,
                stream=self._cfg.stream,
                return_token_ids=True,
                max_tokens=cap,
                stream_interval=self._cfg.stream_interval,
            )
            self._piece_base[i] = base
            prev = self._piece_replica.get(i)
            if prev is not None and prev != replica and not relocated:
                self.stats.num_moved_pieces += 1
                if self._index is not None:
                    self._index.moved((pid, i), self)
            relocated = False
            self._piece_replica[i] = replica
            req = asyncio.ensure_future(
                self._piece(url, body, i, f"{url} prompt {pid!r} sample {i}")
            )
            self._inflight[i] = req
            started = self._started[i] = asyncio.get_running_loop().time()
            self.progress.started_s[i] = started
            if not self._cfg.stream:
                self.progress.caps[i] = cap
            if self._index is not None and not self._cfg.stream:
                self._index.piece_started((pid, i), self, replica, started - self._t0,
                                          _piece_cap(self._cfg, chain))
            if self._stalls is not None:
                self._stalls.start(req, url, self.prompt_tokens(i) + chain.num_generated, cap,
                                   req.cancel, self._streamed_count(i))
            try:
                await req  # a move cancels ``req``; cancelling this task cancels it too
            except asyncio.CancelledError:
                if _cancelling():  # this response's task is cancelled (cutoff, step end)
                    if not req.done() or req.cancelled():
                        self._abort_sglang(i)
                    raise
            except Exception:  # its outcome is read from ``req`` below
                pass
            finally:
                if not req.done():
                    req.cancel()
                    # wait for the piece to end (its outcome is read below); raises only if
                    # this task is cancelled meanwhile, and then that cancellation propagates
                    await asyncio.wait({req})
                self._inflight.pop(i, None)
            stalled = self._stalls is not None and self._stalls.end(req)
            partial = self._partial.pop(i, None)
            ended = asyncio.get_running_loop().time()
            self.progress.started_s.pop(i, None)
            self.progress.caps.pop(i, None)
            if req.cancelled() or isinstance(req.exception(), ReplicaDownError):
                exc = None if req.cancelled() else req.exception()
                if stalled and self._stalls is not None:
                    exc = self._stalls.error(url)
                dropped = self._keep_partial(chain, partial, replica)
                if dropped or not (self._cfg.stream or (exc is not None and refused(exc))):
                    # its tokens are decoded again: counted where streamed, else estimated
                    self.progress.lost.append(LostPiece(i, started, ended, cap, dropped,
                                                        estimate=not self._cfg.stream))
                if exc is not None:
                    self.stats.num_relocations += 1
                    self.down_sample = i
                    self.where[i] = self._relocate(i, replica, base, exc)
                    relocated = True
                self.progress.live_tokens[i] = chain.num_generated
                self._report(i)
                continue
            resp = req.result()
            if chain.prompt_ids is None:
                pids = resp.prompt_token_ids
                chain.prompt_ids = tuple(pids) if pids else self._prompt.token_ids
            chain.add(Piece.of(resp, replica), cap)
            self.stats.num_pieces += 1
            self.progress.timed_tokens += resp.num_tokens
            self.progress.timed_s += ended - started
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

    def _streamed_count(self, sample: int) -> Callable[[], int | None] | None:
        """Streaming: reads the tokens the running piece of ``sample`` streamed so far."""
        if not self._cfg.stream:
            return None
        return lambda: len(p.ids) if (p := self._partial.get(sample)) is not None else None

    def _keep_partial(self, chain: ResponseChain, partial: _Partial | None, replica: int) -> int:
        """A piece ended early (move or fault): keep what it streamed, drop the rest. Returns
        the streamed tokens it had to drop."""
        self.stats.num_lost_pieces += 1
        if partial is None or not partial.ids:
            return 0
        if chain.prompt_ids is None:
            chain.prompt_ids = partial.prompt_ids or self._prompt.token_ids
        if chain.prompt_ids is None:  # cannot continue it: it starts again from scratch
            self.stats.lost_tokens += len(partial.ids)
            return len(partial.ids)
        chain.add(Piece.of(partial.piece(replica, "moved"), replica), len(partial.ids) + 1)
        self.stats.num_pieces += 1
        return 0

    async def _piece(self, url: str, body: JSON, sample: int, where: str) -> Response:
        retry = 0
        while True:
            if self._cfg.backend is Backend.SGLANG:
                body["rid"] = self._rids[sample] = uuid.uuid4().hex
            try:
                if self._cfg.stream:
                    return await self._streamed(url, body, sample, where)
                raw = await self._t.post_json(url, body, self._cfg.request_timeout_s)
                moving = sample in self._moving
                self._moving.discard(sample)
                out = parse_response(self._cfg.backend, raw, 1, where, allow_abort=moving,
                                     keep_json=True)[0]
                if out.finish_reason == "abort":  # aborted by a move: its partial output
                    out = replace(out, finish_reason="moved")
                return out
            except RequestError as exc:
                if not exc.retryable or retry >= self._cfg.max_retries:
                    raise RequestFailedError(
                        f"{where}: {exc} (after {retry} retries)", status=exc.status
                    ) from exc
                delay = min(self._cfg.backoff_max_s, self._cfg.backoff_s * 2**retry)
                retry += 1
                await asyncio.sleep(delay)

    async def _streamed(self, url: str, body: JSON, sample: int, where: str) -> Response:
        if self._cfg.backend is not Backend.VLLM:
            raise RequestFailedError(f"{where}: streamed pieces need the vllm backend")
        part = self._partial[sample] = _Partial()
        key = (self._prompt.prompt_id, sample)
        done = self.chains[sample].num_generated
        p = self.prompt_tokens(sample)
        want_lps = self._sampling.logprobs is not None
        async for chunk in self._t.stream_json(url, body, self._cfg.request_timeout_s):
            choices = chunk.get("choices") or ()
            for ch in choices:
                if part.prompt_ids is None:
                    pids = ch.get("prompt_token_ids")
                    if pids:
                        part.prompt_ids = tuple(int(t) for t in pids)
                        p = self.prompt_tokens(sample)
                if want_lps:
                    lp = ch.get("logprobs") or {}
                    vals = lp.get("token_logprobs") if isinstance(lp, dict) else None
                    if vals:
                        part.logprobs.extend(float(v) for v in vals if v is not None)
            if not choices:
                continue  # the usage chunk
            for _, text, toks, _, reason in _chunk_items(chunk, False):
                part.texts.append(text)
                if toks and len(toks) == 1:
                    part.offsets.append(part.num_chars)
                part.num_chars += len(text)
                if toks:
                    part.ids.extend(toks)
                if reason:
                    part.reason = reason
            n = len(part.ids)
            self.progress.live_tokens[sample] = done + n
            if self._index is not None:
                self._index.set_known(key, p + done + n, p, self)
        check_finished(where, {0: part.reason}, (0,))
        return part.piece(-1, part.reason)  # its ``_Partial`` counts until the chain takes it


def _cancelling() -> bool:
    """The running task has a cancellation pending (not only a task it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _piece_cap(cfg: ExecutorConfig, chain: ResponseChain) -> int:
    """The most tokens a chain's next piece may add: the configured ``max_tokens`` less what
    it generated, at most ``piece_tokens`` (never a forced length)."""
    cap = cfg.sampling.max_tokens - chain.num_generated
    if cfg.piece_tokens is not None:
        cap = min(cap, cfg.piece_tokens)
    return max(cap, 0)
