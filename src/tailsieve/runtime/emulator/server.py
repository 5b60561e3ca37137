"""The emulated vLLM replica: an aiohttp server over an ``EngineDriver``.

Endpoints: POST /v1/completions, POST /v1/chat/completions (JSON or SSE), POST /tokenize, GET /v1/models,
GET /health, GET /version, GET /metrics; SGLang's native POST /generate and POST /abort_request
(``emulator.sglang``). A client that closes its connection aborts its
sequences (the app runs with ``handler_cancellation=True``, so aiohttp cancels the handler).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from statistics import NormalDist
from typing import Any

import numpy as np
from aiohttp import web

from tailsieve.model.replica_engine import Completion
from tailsieve.runtime.emulator import protocol as P
from tailsieve.runtime.emulator import sglang as SG
from tailsieve.runtime.emulator.config import CRASH_EXIT_CODE, EmulatorConfig
from tailsieve.runtime.emulator.driver import EngineDriver
from tailsieve.runtime.emulator.metrics import CONTENT_TYPE, EmulatorMetrics
from tailsieve.runtime.emulator.prefix_cache import PrefixCache
from tailsieve.runtime.tasks import BackgroundTask

MIN_POLL_S = 0.001  # shortest wait between streamed chunk writes, real seconds
SHUTDOWN_TIMEOUT_S = 1.0  # grace for in-flight handlers on aclose, real seconds
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class EmulatorServer:
    """One emulated replica listening on ``host:port`` (port 0 picks a free port).

    ``async with EmulatorServer(cfg) as srv: srv.url`` or ``await start()`` / ``await aclose()``.
    """

    def __init__(self, config: EmulatorConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config
        self.host = host
        self.port = port
        self.crashed = False
        self.driver = EngineDriver(config.replica_config(), config.time_scale, self._on_complete,
                                   config.scheduling_policy == "priority")
        self.prefix_cache = _prefix_cache(config)
        if config.kv_capacity_tokens is not None:
            self.driver.on_sync = self._fit_cache
        self.metrics = EmulatorMetrics(self.driver, config.model_name, self.prefix_cache)
        self._rng = np.random.default_rng([config.seed, 0])  # injected errors + lengths
        self._meta: dict[str, tuple[str, float]] = {}  # seq id -> (finish reason, submitted)
        self._seq_prompt: dict[str, tuple[int, ...]] = {}  # seq id -> prompt ids (to cache)
        self._seq_cached: dict[str, int] = {}  # seq id -> its prompt tokens found cached
        self._transports: set[asyncio.BaseTransport] = set()
        self._sglang_aborts: dict[str, asyncio.Event] = {}  # running /generate rid -> abort
        self.num_abort_requests = 0  # POST /abort_request calls received
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._crash = BackgroundTask("emulator-crash")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ----- lifecycle -----------------------------------------------------------------
    async def start(self) -> str:
        """Start serving; returns the base URL."""
        app = web.Application(middlewares=[self._guard])
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/generate", self._sglang_generate)
        app.router.add_post("/abort_request", self._sglang_abort)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/health", self._health)
        app.router.add_get("/version", self._version)
        app.router.add_get("/load", self._load)
        app.router.add_get("/metrics", self._metrics)
        await self.driver.start()
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S
        )
        try:
            await self._runner.setup()
            self._site = web.TCPSite(self._runner, self.host, self.port)
            await self._site.start()  # OSError when the port is taken
        except BaseException:
            await self.aclose()
            raise
        self.port = int(self._runner.addresses[0][1])
        after_s = self.config.crash_after_s
        if after_s is not None:
            self._crash.start(lambda: self._crash_later(after_s))
        return self.url

    async def aclose(self) -> None:
        await self._crash.aclose()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = self._site = None
        await self.driver.aclose()

    async def __aenter__(self) -> EmulatorServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def crash(self) -> None:
        """Die like a crashed replica: stop listening and drop every open connection."""
        self.crashed = True
        for tr in list(self._transports):
            tr.abort()  # type: ignore[attr-defined]
        if self._site is not None:
            await self._site.stop()

    async def _crash_later(self, after_s: float) -> None:
        await asyncio.sleep(after_s)
        if self.config.crash_mode == "exit":
            os._exit(CRASH_EXIT_CODE)
        await self.crash()

    # ----- plumbing ------------------------------------------------------------------
    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        tr = request.transport
        if self.crashed or tr is None:
            if tr is not None:
                tr.abort()
            raise web.HTTPServiceUnavailable()
        self._transports.add(tr)
        try:
            return await handler(request)
        finally:
            self._transports.discard(tr)

    def _on_complete(self, c: Completion) -> None:
        reason, t0 = self._meta.pop(str(c.request_id), ("length", 0.0))
        self.metrics.finished(reason, c.num_tokens, time.monotonic() - t0)
        self._cache(str(c.request_id), c.num_tokens)

    def _abort(self, seq_id: str) -> None:
        tokens = self.driver.abort(seq_id)  # may complete it first (then _on_complete ran)
        self._meta.pop(seq_id, None)
        self._cache(seq_id, tokens)  # counted in generation_tokens_total; no request_success

    def _cache(self, seq_id: str, num_generated: int) -> None:
        """The prompt and the generated tokens of a finished or aborted sequence stay in this
        replica's prefix cache (a response continued here finds its prefix)."""
        ids = self._seq_prompt.pop(seq_id, None)
        if ids is not None:
            self.prefix_cache.insert(ids + (P.FILLER_TOKEN_ID,) * num_generated)

    def _fit_cache(self) -> None:
        """The prefix cache holds what the running requests leave of the KV budget (as the
        simulator's ``fit_cache``)."""
        kv = self.config.kv_capacity_tokens
        assert kv is not None
        free = kv - self.driver.engine.kv_tokens()
        self.prefix_cache.fit(int(free) // self.prefix_cache.block_tokens)

    def _submit(self, sid: str, k: int, prompt_ids: tuple[int, ...],
                priority: int = 0) -> asyncio.Future[Completion]:
        """Start a sequence; a token-id prompt pays prefill only for its uncached tokens. One
        that carries generated (filler) tokens, a continued response or a later turn of a
        multi-turn trajectory (earlier turns' outputs, then new tokens), prefills them at
        the profile's prefill model (``EmulatorConfig``)."""
        if all(t == P.PROMPT_TOKEN_ID for t in prompt_ids):  # a text prompt: no cache
            return self.driver.submit(sid, k, len(prompt_ids), priority=priority)
        self._seq_prompt[sid] = prompt_ids
        cached = self._seq_cached[sid] = self.prefix_cache.lookup(prompt_ids)
        cont = P.FILLER_TOKEN_ID in prompt_ids
        return self.driver.submit(sid, k, len(prompt_ids), cached_tokens=cached, continuation=cont,
                                  priority=priority)

    def _lengths(self, req: P.GenRequest) -> list[tuple[int, str]]:
        """(tokens, finish_reason) of every sequence, prompt-major then choice."""
        out: list[tuple[int, str]] = []
        cfg = self.config
        for p, prompt_len in enumerate(req.prompt_tokens):
            cap = min(req.max_tokens, cfg.max_model_len - prompt_len)  # vLLM clips silently
            rng = self._rng if req.seed is None else np.random.default_rng([req.seed, p])
            done = _generated_suffix(req.prompt_ids[p]) if req.prompt_ids else 0
            for _ in range(req.n):
                if req.ignore_eos:
                    out.append((cap, "length"))
                    continue
                draw = rng.lognormal(np.log(cfg.length_median_tokens), cfg.length_sigma)
                if done and round(float(draw)) <= done:  # drawn given it reached ``done``
                    draw = _conditional_draw(
                        float(rng.random()), done, cfg.length_median_tokens, cfg.length_sigma
                    )
                k = int(min(max(round(float(draw)) - done, req.min_tokens, 1), cap))
                out.append((k, "length" if k == cap else "stop"))
        return out

    @staticmethod
    def _error(message: str, err_type: str, status: int, param: str | None = None) -> web.Response:
        return web.json_response(P.error_body(message, err_type, status, param), status=status)

    # ----- handlers ------------------------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    def _fault(self) -> web.Response | None:
        """An injected 500 (``error_rate``), or None."""
        if self.config.error_rate > 0 and self._rng.random() < self.config.error_rate:
            return self._error(f"injected fault (error_rate={self.config.error_rate:g})",
                               "InternalServerError", 500)
        return None

    def _start_all(self, req: P.GenRequest, rid: str, lengths: list[tuple[int, str]]
                   ) -> tuple[list[str], list[asyncio.Future[Completion]], list[int]]:
        """Submit every sequence of ``req``: their ids, futures and prompt tokens found cached."""
        seq_ids = [f"{rid}-{i}" for i in range(len(lengths))]
        futs: list[asyncio.Future[Completion]] = []
        now = time.monotonic()
        for i, (sid, (k, reason)) in enumerate(zip(seq_ids, lengths, strict=True)):
            self._meta[sid] = (reason, now)
            futs.append(self._submit(sid, k, req.prompt_ids[i // req.n], req.priority))
        return seq_ids, futs, [self._seq_cached.pop(sid, 0) for sid in seq_ids]

    def _abort_unfinished(self, seq_ids: list[str], futs: list[asyncio.Future[Completion]]) -> None:
        for sid, fut in zip(seq_ids, futs, strict=True):
            if not fut.done() or fut.cancelled():  # gather() cancels them on disconnect
                self._abort(sid)

    async def _generate(self, request: web.Request, kind: P.Kind) -> web.StreamResponse:
        try:
            req = P.parse_request(await _json(request), kind, self.config.model_name,
                                  self.config.max_model_len)
        except P.BadRequest as exc:
            return self._error(str(exc), exc.err_type, exc.status, exc.param)
        if req.priority != 0 and self.config.scheduling_policy != "priority":
            return self._error(f"Got priority {req.priority} but Priority scheduling is not "
                               "enabled.", "BadRequestError", 400)  # vLLM's answer
        if (fault := self._fault()) is not None:
            return fault
        rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        lengths = self._lengths(req)
        seq_ids, futs, hits = self._start_all(req, rid, lengths)
        cached = sum(hits[:: req.n]) if self.config.prompt_tokens_details else None
        try:
            if req.stream:
                return await self._stream(request, req, rid, seq_ids, futs, lengths, cached)
            await asyncio.gather(*futs)
        finally:
            self._abort_unfinished(seq_ids, futs)
        choices = [
            P.choice(req, i, k, reason, list(req.prompt_ids[i // req.n]))
            for i, (k, reason) in enumerate(lengths)
        ]
        total = sum(k for k, _ in lengths)
        out = P.response(req, rid, int(time.time()), self.config.model_name, choices, total,
                         cached)
        return web.json_response(out)

    async def _stream(
        self,
        request: web.Request,
        req: P.GenRequest,
        rid: str,
        seq_ids: list[str],
        futs: list[asyncio.Future[Completion]],
        lengths: list[tuple[int, str]],
        cached: int | None = None,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        created, model, t0 = int(time.time()), self.config.model_name, time.monotonic()
        sent = [0] * len(seq_ids)
        first = [True] * len(seq_ids)
        while True:
            self.driver.sync()
            events: list[dict[str, Any]] = []
            for i, sid in enumerate(seq_ids):
                k, reason = lengths[i]
                have = k if futs[i].done() else self.driver.tokens_so_far(sid)
                if req.kind == "chat" and first[i]:
                    events.append(P.chunk(req, rid, created, model, i, 0, 0, None, first=True))
                    first[i] = False
                if have > sent[i] and sent[i] == 0:
                    self.metrics.first_token(time.monotonic() - t0)
                every = req.stream_interval
                if every > 1:  # vLLM: the first token at once, then every ``every``, the rest
                    while have > sent[i]:
                        size = 1 if sent[i] == 0 else min(every, have - sent[i])
                        if size < every and sent[i] > 0 and have < k:
                            break  # a partial chunk waits for more tokens (or the end)
                        fin = reason if sent[i] + size == k else None
                        events.append(P.chunk(req, rid, created, model, i, sent[i], size, fin))
                        sent[i] += size
                    continue
                for t in range(sent[i], have):
                    fin = reason if t == k - 1 else None
                    events.append(P.chunk(req, rid, created, model, i, t, 1, fin))
                sent[i] = have
            if events:
                await resp.write(b"".join(_sse(e) for e in events))
            pending = [f for f in futs if not f.done()]
            if not pending:
                break
            # the next chunk is due after ``stream_interval`` decode steps
            wait_s = max(MIN_POLL_S, self.driver.step_real_s() * max(req.stream_interval, 1))
            await asyncio.wait(pending, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        if req.include_usage:
            total = sum(k for k, _ in lengths)
            await resp.write(_sse(P.usage_chunk(req, rid, created, model, total, cached)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _sglang_generate(self, request: web.Request) -> web.StreamResponse:
        try:
            req, rid = SG.parse_generate(await _json(request), self.config.max_model_len)
        except P.BadRequest as exc:
            return self._error(str(exc), exc.err_type, exc.status, exc.param)
        if (fault := self._fault()) is not None:
            return fault
        rid = rid or uuid.uuid4().hex
        lengths = self._lengths(req)
        now = time.monotonic()
        seq_ids, futs, hits = self._start_all(req, rid, lengths)
        aborted = self._sglang_aborts.setdefault(rid, asyncio.Event())
        resp: web.StreamResponse | None = None
        try:
            while True:
                self.driver.sync()
                done = aborted.is_set() or all(f.done() for f in futs)
                outs = []
                for i, sid in enumerate(seq_ids):
                    k, reason = lengths[i]
                    fin = futs[i].done() and not futs[i].cancelled()
                    have = k if fin else self.driver.tokens_so_far(sid)
                    why = reason if fin else ("abort" if done else None)
                    out = SG.output(
                        req, sid if req.n > 1 else rid, have, why, time.monotonic() - now,
                        hits[i],
                    )
                    if req.n > 1:
                        out["index"] = i
                    outs.append(out)
                if req.stream:
                    if resp is None:
                        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                        await resp.prepare(request)
                    await resp.write(b"".join(_sse(o) for o in outs))
                if done:
                    break
                pending = [f for f in futs if not f.done()]
                wait_s = max(MIN_POLL_S, self.driver.step_real_s()) if req.stream else None
                waiter: asyncio.Future[Any] = asyncio.ensure_future(aborted.wait())
                try:
                    waits: list[asyncio.Future[Any]] = [*pending, waiter]
                    await asyncio.wait(waits, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
        finally:
            self._sglang_aborts.pop(rid, None)
            self._abort_unfinished(seq_ids, futs)
        if resp is not None:
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        return web.json_response(outs if req.n > 1 else outs[0])

    async def _sglang_abort(self, request: web.Request) -> web.Response:
        try:
            body = await _json(request)
        except P.BadRequest as exc:
            return self._error(str(exc), "BadRequestError", 400)
        self.num_abort_requests += 1
        rid = str(body.get("rid"))
        for key, ev in self._sglang_aborts.items():
            if body.get("abort_all") or key == rid:
                ev.set()
        return web.Response(status=200)

    async def _tokenize(self, request: web.Request) -> web.Response:
        """vLLM's ``POST /tokenize``: ``{prompt}`` or ``{messages}`` (the chat template applied)
        -> ``{tokens, count, max_model_len}``, the ids the generation endpoints give them."""
        try:
            body = await _json(request)
            if not isinstance(body, dict):
                raise P.BadRequest("request body must be a JSON object")
            ids = P.tokenize_ids(body)
        except P.BadRequest as exc:
            return self._error(str(exc), "BadRequestError", 400)
        return web.json_response({"tokens": list(ids), "count": len(ids),
                                  "max_model_len": self.config.max_model_len})

    async def _models(self, request: web.Request) -> web.Response:
        name = self.config.model_name
        card = {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": name,
            "parent": None,
            "max_model_len": self.config.max_model_len,
            "permission": [],
        }
        return web.json_response({"object": "list", "data": [card]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "tailsieve-emulator"})

    async def _load(self, request: web.Request) -> web.Response:
        self.driver.sync()
        load = self.driver.num_running + self.driver.num_waiting
        return web.json_response({"server_load": load})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})


async def _json(request: web.Request) -> Any:
    """The request's JSON body; ``P.BadRequest`` when it is not JSON."""
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise P.BadRequest("request body is not valid JSON") from None


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@asynccontextmanager
async def run_emulator(
    config: EmulatorConfig, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Run an emulator in this event loop; yields its base URL (``http://127.0.0.1:PORT``)."""
    async with EmulatorServer(config, host, port) as server:
        yield server.url


def _prefix_cache(config: EmulatorConfig) -> PrefixCache:
    """A replica's prefix cache: as many blocks as its KV budget holds (vLLM keeps cached
    blocks in the KV cache until it needs them; ``EmulatorServer._fit_cache`` then shrinks it
    to what the running requests leave), unbounded without a budget."""
    kv = config.kv_capacity_tokens
    if kv is None:
        return PrefixCache()
    return PrefixCache(max_blocks=max(1, kv // PrefixCache().block_tokens))


def _generated_suffix(ids: tuple[int, ...]) -> int:
    """Trailing generated (filler) tokens of a prompt: a continuation's tokens so far."""
    n = 0
    for t in reversed(ids):
        if t != P.FILLER_TOKEN_ID:
            break
        n += 1
    return n


def _conditional_draw(u: float, done: int, median: float, sigma: float) -> float:
    """A lognormal length drawn given that it exceeds ``done`` tokens (inverse CDF on the tail),
    for a continuation whose own draw ended before the tokens it already has."""
    nd = NormalDist(math.log(median), sigma)
    lo = nd.cdf(math.log(done + 0.5))
    q = min(lo + u * (1.0 - lo), 1.0 - 1e-12)
    return max(math.exp(nd.inv_cdf(q)), done + 1.0)
