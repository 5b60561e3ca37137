"""The generation routes: a request parsed, run at the service, answered whole or streamed.

Errors before anything is sent are HTTP errors with vLLM's error JSON (``api_error``); an error
after a stream has begun is sent as a ``data: {"error": ...}`` event before ``[DONE]``, as vLLM
does. A client that goes away cancels its samples (their pieces are aborted on the servers).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tailsieve.errors import TailSieveError
from tailsieve.runtime.proxy import openai_api, openai_format, sglang_api
from tailsieve.runtime.proxy.api_error import ApiError
from tailsieve.runtime.proxy.config import header_key
from tailsieve.runtime.proxy.guard import FRONT
from tailsieve.runtime.proxy.request import Api, ProxyRequest
from tailsieve.runtime.proxy.request_run import RequestRun
from tailsieve.runtime.proxy.sample import SampleOutput
from tailsieve.runtime.proxy.service import ProxyService
from tailsieve.runtime.proxy.stream import Delta, StreamCursor

PARSERS: dict[Api, Callable[[Any], ProxyRequest]] = {
    Api.COMPLETIONS: openai_api.parse_completions,
    Api.CHAT: openai_api.parse_chat,
    Api.GENERATE: sglang_api.parse_generate,
}
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


async def read_json(request: web.Request, allow_empty: bool = False) -> Any:
    """The request's JSON body, read and checked by the proxy's front door (``guard``)."""
    return await request.app[FRONT].read_json(request, allow_empty)


async def handle(request: web.Request, api: Api, service: ProxyService,
                 session_headers: tuple[str, ...], group_headers: tuple[str, ...],
                 ) -> web.StreamResponse:
    """Answer one generation request (``ApiError`` before a run starts propagates)."""
    body = await read_json(request)
    req = PARSERS[api](body)
    key = header_key(request.headers, session_headers) or req.body_key
    group = header_key(request.headers, group_headers)
    run = await service.start(req, key, group)
    try:
        if req.stream:
            return await _stream(request, service, run)
        outputs = await run.wait()
        return web.json_response(_whole(service, run, outputs), dumps=_dumps)
    finally:
        if not run.done:
            run.cancel()
        service.finish(run)


def _whole(service: ProxyService, run: RequestRun, outputs: list[SampleOutput]) -> Any:
    req, model = run.req, service.served.name
    if req.api is Api.COMPLETIONS:
        return openai_format.completion_response(req, model, outputs, run.prompt_ids)
    if req.api is Api.CHAT:
        return openai_format.chat_response(req, model, outputs, run.prompt_ids)
    return sglang_api.response(req, outputs, req.rid or uuid.uuid4().hex)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _sse(obj: Any) -> bytes:
    return b"data: " + _dumps(obj).encode() + b"\n\n"


async def _stream(request: web.Request, service: ProxyService, run: RequestRun,
                  ) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    writer = _OpenAIWriter(service, run) if run.req.api is not Api.GENERATE else \
        _SGLangWriter(run)
    req = run.req
    cursors = [StreamCursor(req.stop, req.logprobs is not None) for _ in run.traces]
    await resp.write(b"".join(_sse(c) for c in writer.opening()))
    pending = set(range(req.num_samples))
    while pending:
        kind, i = await run.events.get()
        if kind == "error":
            err = run.error or ApiError("the request failed", 500, "InternalServerError")
            await resp.write(_sse(err.body()))
            break
        if i not in pending:
            continue
        if kind == "tokens":
            live = run.lives[i]
            d = cursors[i].progress(live, live.cuts.popleft() if live.cuts else None)
            chunk = writer.chunk(i, d, None) if d is not None else None
        else:
            out = run.outputs[i]
            assert out is not None
            try:
                d = cursors[i].finish(out)
            except TailSieveError as exc:
                await resp.write(_sse(ApiError(str(exc), 500, "InternalServerError").body()))
                break
            chunk = writer.chunk(i, d, out)
            pending.discard(i)
        if chunk is not None:
            await resp.write(_sse(chunk))
    else:
        tail = writer.closing([o for o in run.outputs if o is not None])
        if tail is not None:
            await resp.write(_sse(tail))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


class _OpenAIWriter:
    def __init__(self, service: ProxyService, run: RequestRun) -> None:
        self.run = run
        self.fmt = openai_format.OpenAIStream(run.req, service.served.name)

    def _prompt(self, i: int) -> tuple[int, ...]:
        return self.run.prompt_ids[i // self.run.req.n]

    def opening(self) -> list[Any]:
        return [c for i in range(self.run.req.num_samples)
                for c in self.fmt.opening(i, self._prompt(i))]

    def chunk(self, i: int, d: Delta, out: SampleOutput | None) -> Any:
        return self.fmt.delta(i, d, self._prompt(i), out)

    def closing(self, outputs: list[SampleOutput]) -> Any:
        if not self.run.req.include_usage:
            return None
        return self.fmt.usage(outputs, self.run.prompt_ids)


class _SGLangWriter:
    """SGLang streams each sample as it is so far (cumulative): what the cursor sent, a
    prefix of the sample's live tokens."""

    def __init__(self, run: RequestRun) -> None:
        self.run = run
        self.rid = run.req.rid or uuid.uuid4().hex

    def opening(self) -> list[Any]:
        return []

    def chunk(self, i: int, d: Delta, out: SampleOutput | None) -> Any:
        req = self.run.req
        rid = sglang_api.sample_rid(req, self.rid, i)
        if out is not None:
            return sglang_api.output(req, out, rid, done=True)
        live = self.run.lives[i]
        n = d.start + len(d.token_ids)
        lps = live.lps if d.logprobs is not None else None
        strs = live.strs if d.token_strs is not None else None
        so_far = SampleOutput(
            index=i, prompt_ids=self.run.prompt_ids[i // req.n],
            token_ids=tuple(live.ids[:n]),
            text=live.text_since(0)[:d.char_start + len(d.text)], finish_reason="length",
            logprobs=tuple(lps[:n]) if lps is not None else None,
            token_strs=tuple(strs[:n]) if strs is not None else None)
        return sglang_api.output(req, so_far, rid, done=False)

    def closing(self, outputs: list[SampleOutput]) -> Any:
        return None
