"""One attempt of one group: its HTTP requests, retries and progress.

A group is sent either as one request with ``n = group_size`` or as ``group_size`` single
requests (``split_groups``, the default; always for a spread group, whose responses go to
several replicas): then the executor knows, at an abort, how many
responses had finished and how many tokens they hold, and in replay mode each response gets its
own forced length. What an answer means is ``runtime.faults``'s: request errors (HTTP 5xx,
malformed JSON) are retried here with exponential backoff; a replica fault (``ReplicaDownError``:
unreachable, its engine died, a stream cut or the engine's error message, a stall) is not
retried here: the executor regenerates the whole group elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tailsieve.errors import ConfigError
from tailsieve.runtime.backends import (
    Backend,
    PromptInput,
    Response,
    SamplingParams,
    build_request,
    parse_response,
)
from tailsieve.runtime.faults import ReplicaDownError, RequestError, check_finished, refused
from tailsieve.runtime.stall_watch import StallSettings, StallWatch
from tailsieve.runtime.transport import JSON, Transport

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
    """Runs the requests of one group attempt against one replica URL, or (a spread group) one
    URL per response. ``down_sample`` names the response whose replica went down."""

    def __init__(
        self,
        transport: Transport,
        base_url: str | Sequence[str],
        config: ExecutorConfig,
        prompt: PromptInput,
        group_size: int,
        forced_length: ForcedLength | None,
        progress: AttemptProgress,
        stalls: StallWatch | None = None,
    ) -> None:
        self._t = transport
        self._stalls = stalls  # hung replicas: a request without progress is a fault
        bases = [base_url] * group_size if isinstance(base_url, str) else list(base_url)
        if len(bases) != group_size:
            raise ConfigError(f"{len(bases)} replica URLs for a group of {group_size}")
        self._urls = [b.rstrip("/") + config.backend.path for b in bases]
        self._url = self._urls[0]
        self._cfg = config
        self._prompt = prompt
        self._n = group_size
        self._forced = forced_length
        self.progress = progress
        self._aborts: set[asyncio.Future[None]] = set()  # SGLang /abort_request in flight
        self.down_sample = 0  # response whose replica raised ``ReplicaDownError``

    async def run(self) -> list[Response]:
        """All ``group_size`` responses in sample order; raises ``ReplicaDownError`` or
        ``RequestFailedError``. Cancelling it cancels (closes) every open request."""
        cfg, pid = self._cfg, self._prompt.prompt_id
        seed = cfg.sampling.seed if self._prompt.seed is None else self._prompt.seed
        if not cfg.split_groups and len(set(self._urls)) == 1:
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

    async def _one(
        self, sample: int, n: int, forced: int | None, seed: int | None
    ) -> list[Response]:
        if self._cfg.model is None:
            raise ConfigError("no served model name: LiveExecutor.resolve_model() sets it")
        body = build_request(
            self._cfg.backend,
            self._cfg.model,
            self._prompt,
            self._cfg.sampling,
            n,
            forced_tokens=forced,
            seed=seed,
            stream=self._cfg.stream,
            return_token_ids=self._cfg.return_token_ids,
            stream_interval=self._cfg.stream_interval,
        )
        url = self._urls[sample]
        where = f"{url} prompt {self._prompt.prompt_id!r} sample {sample}"
        retry = 0
        clock = asyncio.get_running_loop().time
        self.progress.streaming = self._cfg.stream
        while True:
            sent_s = clock()
            self.progress.started_s.update(dict.fromkeys(range(sample, sample + n), sent_s))
            if self._cfg.backend is Backend.SGLANG:
                body["rid"] = uuid.uuid4().hex  # per-request abort (POST /abort_request)
            try:
                out = await self._watched(url, body, sample, n, where, forced)
                break
            except asyncio.CancelledError:
                if self._cfg.backend is Backend.SGLANG:  # shielded: the step's clean-up may
                    # cancel this coroutine again before the abort is sent
                    task = asyncio.ensure_future(self._abort_sglang(url, str(body["rid"])))
                    self._aborts.add(task)
                    task.add_done_callback(self._aborts.discard)
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(task)
                raise
            except ReplicaDownError as exc:
                self.down_sample = sample
                if refused(exc):  # the server was gone before these requests: none generated
                    for s in [s for s, u in enumerate(self._urls) if u == url]:
                        self.progress.started_s.pop(s, None)
                raise
            except RequestError as exc:
                if not exc.retryable or retry >= self._cfg.max_retries:
                    raise RequestFailedError(
                        f"{where}: {exc} (after {retry} retries)", status=exc.status,
                        sample=sample,
                    ) from exc
                delay = min(self._cfg.backoff_max_s, self._cfg.backoff_s * 2**retry)
                retry += 1
                await asyncio.sleep(delay)
        done_s = clock()
        for i, r in enumerate(out):
            self.progress.live_tokens.pop(sample + i, None)
            self.progress.timed_s += done_s - self.progress.started_s.pop(sample + i, sent_s)
            self.progress.timed_tokens += r.num_tokens
            self.progress.num_finished += 1
            self.progress.finished_tokens += r.num_tokens
        return out

    async def _watched(self, url: str, body: JSON, sample: int, n: int, where: str,
                       forced: int | None) -> list[Response]:
        """One request, under the stall watch when there is one."""
        if self._cfg.stream:
            call = self._streamed(url, body, sample, n, where)
        else:
            call = self._posted(url, body, n, where)
        if self._stalls is None:
            return await call
        cap = forced if forced is not None else self._cfg.sampling.max_tokens
        prompt_tokens = len(self._prompt.token_ids or ())
        live = self.progress.live_tokens
        return await self._stalls.watched(
            (id(self), sample), url, prompt_tokens, cap, call,
            (lambda: live.get(sample)) if self._cfg.stream else None)

    async def _posted(self, url: str, body: JSON, n: int, where: str) -> list[Response]:
        raw = await self._t.post_json(url, body, self._cfg.request_timeout_s)
        return parse_response(self._cfg.backend, raw, n, where)

    async def _abort_sglang(self, url: str, rid: str) -> None:
        """SGLang notices a closed connection only at its next 4 s disconnect check: abort the
        request by id right away (best effort; the closed connection remains the fallback)."""
        abort_url = url.removesuffix(Backend.SGLANG.path) + "/abort_request"
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._t.post_json(abort_url, {"rid": rid}, 2.0), 2.0)

    async def _streamed(
        self, url: str, body: JSON, sample: int, n: int, where: str
    ) -> list[Response]:
        texts: dict[int, list[str]] = {}
        ids: dict[int, list[int]] = {}
        counts: dict[int, int] = {}
        reasons: dict[int, str] = {}
        times: dict[int, list[float]] = {}  # per choice: chunk arrival, s after the send
        marks: dict[int, list[int]] = {}  # per choice: tokens after each chunk
        prompt_ids: list[int] | None = None
        sg = self._cfg.backend is Backend.SGLANG
        t0 = time.perf_counter()  # the loop clock may tick in ms (uvloop): too coarse here
        async for chunk in self._t.stream_json(url, body, self._cfg.request_timeout_s):
            now_s = round(time.perf_counter() - t0, 6)
            if prompt_ids is None:  # vLLM: in the first chunk (chat) or its first choice
                prompt_ids = chunk.get("prompt_token_ids") or next(
                    (c["prompt_token_ids"] for c in chunk.get("choices") or ()
                     if c.get("prompt_token_ids")), None)  # fmt: skip
            for idx, text, tok, cnt, reason in _chunk_items(chunk, sg):
                if sg:  # SGLang chunks are cumulative
                    texts[idx] = [text]
                    counts[idx] = cnt
                else:
                    texts.setdefault(idx, []).append(text)
                    if tok is not None:
                        ids.setdefault(idx, []).extend(tok)
                    step = len(tok) if tok is not None else int(bool(text) or not reason)
                    counts[idx] = counts.get(idx, 0) + step
                if reason:
                    reasons[idx] = reason
                times.setdefault(idx, []).append(now_s)
                marks.setdefault(idx, []).append(counts[idx])
                self.progress.live_tokens[sample + idx] = counts[idx]
            usage = chunk.get("usage") or {}
            if n == 1 and not sg and usage.get("completion_tokens") is not None and counts:
                counts[0] = int(usage["completion_tokens"])
                marks[0][-1] = counts[0]
        check_finished(where, reasons, range(n))
        return [
            Response(
                text="".join(texts[i]),
                num_tokens=counts[i],
                finish_reason=reasons[i],
                token_ids=tuple(ids[i]) if i in ids else None,
                prompt_token_ids=None if prompt_ids is None else tuple(map(int, prompt_ids)),
                chunk_times_s=tuple(times[i]),
                chunk_tokens=tuple(marks[i]),
            )
            for i in range(n)
        ]


def _chunk_items(chunk: JSON, sglang: bool) -> list[tuple[int, str, list[int] | None, int, str]]:
    if sglang:
        meta = chunk.get("meta_info", {})
        fr = meta.get("finish_reason")
        reason = fr.get("type", "") if isinstance(fr, dict) else str(fr or "")
        cnt = int(meta.get("completion_tokens", 0))
        return [(int(chunk.get("index", 0)), chunk.get("text", ""), None, cnt, reason)]
    items: list[tuple[int, str, list[int] | None, int, str]] = []
    for ch in chunk.get("choices") or []:
        delta = ch.get("delta")
        text = (delta or {}).get("content") or "" if delta is not None else ch.get("text") or ""
        raw = ch.get("token_ids")
        toks = [int(t) for t in raw] if raw is not None else None
        items.append((int(ch.get("index", 0)), text, toks, 0, ch.get("finish_reason") or ""))
    return items


async def _all_or_first_error(
    calls: Sequence[Awaitable[list[Response]]],
) -> list[list[Response]]:
    """Await all; on the first error cancel the rest and raise it (a ``ReplicaDownError`` wins
    over other errors so a dead replica is never reported as a request failure)."""
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
