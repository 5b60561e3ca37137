"""One attempt of one group whose responses are generated whole, and its progress.

A group is sent either as one request with ``n = group_size`` or as ``group_size`` single
requests (``split_groups``, the default; always for a spread group, whose responses go to
several replicas): then the executor knows, at an abort, how many
responses had finished and how many tokens they hold, and in replay mode each response gets its
own forced length. Each request is a piece through the engine client every path uses
(``runtime.sessions.http_runner.HttpPieceRunner``: the wire formats, streaming, retries of
request errors and SGLang's aborts); ``n > 1`` stays a request of its own there
(``run_samples``), as the server then shares the prompt's prefill among the responses. A replica
fault (``ReplicaDownError``, ``runtime.faults``: unreachable, its engine died, a stream cut or
the engine's error message, a stall) is not retried: the executor regenerates the whole group
elsewhere, and so is a response the server ended without a finish reason (or aborted without
a status: an ``/abort_request``), as a stream cut before its end is. SGLang's abort of a request
it refuses (a status and its message, ``runtime.faults.engine_abort``) fails the response
with that message and takes no replica out.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from tailsieve.errors import ConfigError
from tailsieve.runtime.backends import Backend, PromptInput, Response, SamplingParams
from tailsieve.runtime.faults import ReplicaDownError, RequestError, refused
from tailsieve.runtime.sessions.http_runner import HttpPieceRunner
from tailsieve.runtime.sessions.pieces import PieceOutput, PieceRequest, TokenDelta, TokenSink
from tailsieve.runtime.sessions.profile import LiveProfile
from tailsieve.runtime.stall_watch import StallSettings, StallWatch

ForcedLength = Callable[[str, int], int]  # (prompt_id, sample) -> forced generated tokens


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    """How the live executor talks to replicas."""

    backend: Backend = Backend.VLLM
    model: str | None = None  # served model name; None = ask the servers (the one they serve)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    split_groups: bool = True  # n single requests per group (True) or one request with n
    stream: bool = False  # streaming responses (live tokens-so-far; more router CPU)
    request_timeout_s: float | None = 3600.0  # a request running longer = replica fault
    max_retries: int = 3  # retries of a request error before the step fails
    backoff_s: float = 0.25  # first retry delay; doubles per retry
    backoff_max_s: float = 8.0  # cap of the retry delay
    health_timeout_s: float = 5.0  # GET /health probe timeout
    probe_interval_s: float = 1.0  # a failed replica's /health is probed this often mid-step
    return_token_ids: bool = True  # ask vLLM for per-choice token ids (needed when n > 1)
    continuation: bool = False  # responses are chains of pieces: moves, faults lose one piece
    piece_tokens: int | None = None  # continuation: max tokens per piece (None = no bound)
    stream_interval: int | None = None  # streaming on vLLM: tokens per streamed chunk (vLLM's
    # per-request stream_interval, checked on vLLM 0.32); None: every token
    stall: StallSettings = field(default_factory=StallSettings)  # when a replica is hung

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ConfigError("backoff_s and backoff_max_s must be >= 0")
        if self.probe_interval_s <= 0:
            raise ConfigError(f"probe_interval_s must be > 0, got {self.probe_interval_s}")
        if self.piece_tokens is not None and self.piece_tokens < 1:
            raise ConfigError(f"piece_tokens must be >= 1, got {self.piece_tokens}")
        if self.piece_tokens is not None and not self.continuation:
            raise ConfigError("piece_tokens needs continuation=True")
        if self.continuation and self.stream and self.backend is not Backend.VLLM:
            raise ConfigError("continuation with stream=True needs the vllm backend (SGLang "
                              "pieces are interrupted by /abort_request without it)")
        if self.stream_interval is not None:
            if self.stream_interval < 1:
                raise ConfigError(f"stream_interval must be >= 1, got {self.stream_interval}")
            if not self.stream or self.backend is Backend.SGLANG:
                raise ConfigError("stream_interval needs stream=True on a vLLM backend")
        if self.request_timeout_s is not None and self.request_timeout_s <= 0:
            raise ConfigError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")

    @property
    def defers_moves(self) -> bool:
        """A move waits for the running piece's end: vLLM pieces, unstreamed (cancelling one
        would drop what it generated)."""
        return not self.stream and self.backend is not Backend.SGLANG


class RequestFailedError(RequestError):
    """A request error that retries could not fix (or that is not retryable); ``sample`` is
    the response whose request failed (its replica is the one that answered)."""

    def __init__(self, message: str, status: int | None = None, sample: int = 0) -> None:
        super().__init__(message, status=status, retryable=False)
        self.sample = sample


class LostPiece(NamedTuple):
    """A continuation piece that ended before its end without its tokens being kept (its
    replica failed, or a move had to drop it): what it had generated is decoded again."""

    sample: int
    started_s: float  # loop time it was sent
    ended_s: float  # loop time it was lost
    cap: int  # the most tokens it could have generated
    exact: int = 0  # tokens it is known to have generated and that were dropped (streamed)
    estimate: bool = True  # its unseen tokens are estimated (False: streamed, or none made)


@dataclass(slots=True)
class AttemptProgress:
    """Live evidence of one attempt, read by the executor at an abort or a fault."""

    num_finished: int = 0  # responses finished
    finished_tokens: int = 0  # tokens of the finished responses
    live_tokens: dict[int, int] = field(default_factory=dict)  # sample -> tokens observed of
    # an unfinished response (streaming; with continuation, up to its last seam plus streamed)
    started_s: dict[int, float] = field(default_factory=dict)  # unfinished: sample -> sent at
    # (with continuation: when its running piece was sent)
    caps: dict[int, int] = field(default_factory=dict)  # continuation: unfinished sample ->
    # the most tokens its running piece may add (else the response's limit applies)
    timed_tokens: int = 0  # tokens of completed requests (responses, or continuation pieces)
    timed_s: float = 0.0  # their request seconds (sent to last token): the decode rate's sample
    streaming: bool = False  # unfinished responses' tokens are observed (live_tokens)
    lost: list[LostPiece] = field(default_factory=list)  # continuation: pieces lost mid-way

    @property
    def tokens_so_far(self) -> int:
        """Tokens of unfinished responses (streaming only; -1 when not observed)."""
        return sum(self.live_tokens.values()) if self.live_tokens else -1


class GroupAttempt:
    """Runs one group attempt through the engine client (``runner``): each response as one
    piece on runner replica ``targets[i]``, or (``split_groups=False``, every response on one
    replica) the whole group as one request with ``n``. ``down_sample`` names the response
    whose replica went down."""

    def __init__(
        self,
        runner: HttpPieceRunner,
        targets: Sequence[int],
        config: ExecutorConfig,
        prompt: PromptInput,
        forced_length: ForcedLength | None,
        progress: AttemptProgress,
        stalls: StallWatch | None = None,
        timings: LiveProfile | None = None,
    ) -> None:
        self._runner = runner
        self._stalls = stalls  # hung replicas: a request without progress is a fault
        self._timings = timings  # the ``auto`` profile's fit, fed each request's timing
        self._targets = list(targets)
        self._cfg = config
        self._prompt = prompt
        self._n = len(self._targets)
        self._forced = forced_length
        self.progress = progress
        self.down_sample = 0  # response whose replica raised ``ReplicaDownError``

    async def run(self) -> list[Response]:
        """All responses in sample order; raises ``ReplicaDownError`` or
        ``RequestFailedError``. Cancelling it cancels (closes) every open request."""
        cfg, pid = self._cfg, self._prompt.prompt_id
        seed = cfg.sampling.seed if self._prompt.seed is None else self._prompt.seed
        if not cfg.split_groups and len(set(self._targets)) == 1:
            forced = max(self._forced(pid, i) for i in range(self._n)) if self._forced else None
            return await self._one(0, self._n, forced, seed)
        calls = [
            self._one(
                i,
                1,
                self._forced(pid, i) if self._forced else None,
                seed + i if seed is not None else None,
            )
            for i in range(self._n)
        ]
        parts = await _all_or_first_error(calls)
        return [r for part in parts for r in part]

    def _piece(self, sample: int, n: int, forced: int | None, seed: int | None) -> PieceRequest:
        p, sp = self._prompt, self._cfg.sampling
        return PieceRequest(
            prompt_ids=p.token_ids or (), sampling=replace(sp, seed=seed),
            max_tokens=sp.max_tokens if forced is None else forced,
            request_id=f"{p.prompt_id}-{sample}-{uuid.uuid4().hex}",
            prompt_json=getattr(p.token_ids, "json", None), prompt_text=p.text,
            forced=forced is not None, messages=p.messages, num_samples=n,
            sink=self._sink(sample) if self._cfg.stream else None)

    def _sink(self, sample: int) -> TokenSink:
        """Streaming: counts what each response of the request streamed."""
        live = self.progress.live_tokens

        def took(d: TokenDelta) -> None:
            i = sample + d.sample
            live[i] = live.get(i, 0) + (len(d.token_ids) or 1)

        return took

    async def _one(
        self, sample: int, n: int, forced: int | None, seed: int | None
    ) -> list[Response]:
        target = self._targets[sample]
        base = self._runner.endpoints[target]
        url = base + self._cfg.backend.path
        where = f"{url} prompt {self._prompt.prompt_id!r} sample {sample}"
        piece = self._piece(sample, n, forced, seed)
        clock = asyncio.get_running_loop().time
        self.progress.streaming = self._cfg.stream
        sent_s = clock()
        self.progress.started_s.update(dict.fromkeys(range(sample, sample + n), sent_s))
        timings, outs = self._timings, None
        timed = timings.time_piece(base, sent_s, piece) if timings is not None else None
        try:
            outs = await self._watched(target, url, piece, sample)
        except ReplicaDownError as exc:
            self.down_sample = sample
            if refused(exc):  # the server was gone before these requests: none generated
                for s in [s for s, t in enumerate(self._targets) if t == target]:
                    self.progress.started_s.pop(s, None)
            raise
        except RequestError as exc:
            raise RequestFailedError(f"{where}: {exc}", status=exc.status,
                                     sample=sample) from exc
        finally:
            if timings is not None:
                timings.record_piece(timed, sent_s, clock(), outs)
        if any(o.finish_reason == "abort" for o in outs):  # never a finished response
            self.down_sample = sample
            raise ReplicaDownError(f"{where}: the server ended a response without a finish "
                                   "reason, or aborted it")
        done_s = clock()
        for i, o in enumerate(outs):
            self.progress.live_tokens.pop(sample + i, None)
            self.progress.timed_s += done_s - self.progress.started_s.pop(sample + i, sent_s)
            self.progress.timed_tokens += o.num_generated
            self.progress.num_finished += 1
            self.progress.finished_tokens += o.num_generated
        return [_response(o) for o in outs]

    async def _watched(self, target: int, url: str, piece: PieceRequest,
                       sample: int) -> list[PieceOutput]:
        """One request, under the stall watch when there is one."""
        call = self._runner.run_samples(target, piece)
        if self._stalls is None:
            return await call
        live = self.progress.live_tokens
        return await self._stalls.watched(
            (id(self), sample), url, len(self._prompt.token_ids or ()), piece.max_tokens, call,
            (lambda: live.get(sample)) if self._cfg.stream else None)


def _response(out: PieceOutput) -> Response:
    """A whole response's one piece as the response (its ids without the server's JSON of
    them, which only a continued piece sends back)."""
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
    itself (the executor regenerates the group), it cancels them all and reads their errors."""
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
