"""SGLang's native endpoints of the emulated replica: POST /generate and POST /abort_request.

``SGLangEndpoints`` adds the two handlers (and the running ``/generate`` requests an abort
finds) to ``EmulatedReplica``; ``EmulatorServer`` (``emulator.server``) routes to them. The
bodies are parsed and written by ``emulator.sglang``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from aiohttp import web

from tailsieve.runtime.emulator import protocol as P
from tailsieve.runtime.emulator import sglang as SG
from tailsieve.runtime.emulator.config import EmulatorConfig
from tailsieve.runtime.emulator.replica import MIN_POLL_S, EmulatedReplica, request_json, sse_event


class SGLangEndpoints(EmulatedReplica):
    """The replica's SGLang ``/generate`` and ``/abort_request`` handlers."""

    def __init__(self, config: EmulatorConfig) -> None:
        super().__init__(config)
        self._sglang_aborts: dict[str, asyncio.Event] = {}  # running /generate rid -> abort
        self.num_abort_requests = 0  # POST /abort_request calls received

    async def _sglang_generate(self, request: web.Request) -> web.StreamResponse:
        try:
            req, rid = SG.parse_generate(await request_json(request), self.config.max_model_len)
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
                    await resp.write(b"".join(sse_event(o) for o in outs))
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
            body = await request_json(request)
        except P.BadRequest as exc:
            return self._error(str(exc), "BadRequestError", 400)
        self.num_abort_requests += 1
        rid = str(body.get("rid"))
        for key, ev in self._sglang_aborts.items():
            if body.get("abort_all") or key == rid:
                ev.set()
        return web.Response(status=200)
