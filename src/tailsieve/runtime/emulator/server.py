"""The emulated vLLM replica: an aiohttp server over an ``EngineDriver``.

Endpoints: POST /v1/completions, POST /v1/chat/completions (JSON or SSE), POST /tokenize,
GET /v1/models, GET /health, GET /version, GET /metrics; SGLang's native POST /generate and
POST /abort_request (``emulator.sglang_endpoints``). A client that closes its connection aborts
its sequences (the app runs with ``handler_cancellation=True``, so aiohttp cancels the handler).
``EmulatorServer`` holds the lifecycle, the crash and the handlers here; the engine, the prefix
cache and the sequences' bookkeeping under them are ``emulator.replica``'s ``EmulatedReplica``.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from tailsieve.model.replica_engine import Completion
from tailsieve.runtime.emulator import protocol as P
from tailsieve.runtime.emulator import responses as R
from tailsieve.runtime.emulator.config import CRASH_EXIT_CODE, EmulatorConfig
from tailsieve.runtime.emulator.metrics import CONTENT_TYPE
from tailsieve.runtime.emulator.replica import MIN_POLL_S, request_json, sse_event
from tailsieve.runtime.emulator.sglang_endpoints import SGLangEndpoints
from tailsieve.runtime.tasks import BackgroundTask

SHUTDOWN_TIMEOUT_S = 1.0  # grace for in-flight handlers on aclose, real seconds
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class EmulatorServer(SGLangEndpoints):
    """One emulated replica listening on ``host:port`` (port 0 picks a free port).

    ``async with EmulatorServer(cfg) as srv: srv.url`` or ``await start()`` / ``await aclose()``.
    """

    def __init__(self, config: EmulatorConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(config)
        self.host = host
        self.port = port
        self.crashed = False
        self._transports: set[asyncio.BaseTransport] = set()
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

    # ----- handlers ------------------------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def _generate(self, request: web.Request, kind: P.Kind) -> web.StreamResponse:
        try:
            req = P.parse_request(await request_json(request), kind, self.config.model_name,
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
            R.choice(req, i, k, reason, list(req.prompt_ids[i // req.n]))
            for i, (k, reason) in enumerate(lengths)
        ]
        total = sum(k for k, _ in lengths)
        out = R.response(req, rid, int(time.time()), self.config.model_name, choices, total,
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
                    events.append(R.chunk(req, rid, created, model, i, 0, 0, None, first=True))
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
                        events.append(R.chunk(req, rid, created, model, i, sent[i], size, fin))
                        sent[i] += size
                    continue
                for t in range(sent[i], have):
                    fin = reason if t == k - 1 else None
                    events.append(R.chunk(req, rid, created, model, i, t, 1, fin))
                sent[i] = have
            if events:
                await resp.write(b"".join(sse_event(e) for e in events))
            pending = [f for f in futs if not f.done()]
            if not pending:
                break
            # the next chunk is due after ``stream_interval`` decode steps
            wait_s = max(MIN_POLL_S, self.driver.step_real_s() * max(req.stream_interval, 1))
            await asyncio.wait(pending, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        if req.include_usage:
            total = sum(k for k, _ in lengths)
            await resp.write(sse_event(R.usage_chunk(req, rid, created, model, total, cached)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _tokenize(self, request: web.Request) -> web.Response:
        """vLLM's ``POST /tokenize``: ``{prompt}`` or ``{messages}`` (the chat template applied)
        -> ``{tokens, count, max_model_len}``, the ids the generation endpoints give them."""
        try:
            body = await request_json(request)
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


@asynccontextmanager
async def run_emulator(
    config: EmulatorConfig, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Run an emulator in this event loop; yields its base URL (``http://127.0.0.1:PORT``)."""
    async with EmulatorServer(config, host, port) as server:
        yield server.url
