"""A recording wire proxy in front of a real vLLM server, and the router's exact guarantees
checked on what it recorded.

``WireProxy(upstream)`` listens on 127.0.0.1 (a free port) and forwards every request to the
upstream server unchanged, streamed answers chunk by chunk. For each completions request it
records the request body and, per choice, the token ids (with their logprobs and top
logprobs) that it forwarded to the router, the finish reason and the prompt's token ids as
the server tokenized it. A router that closes its connection closes the upstream one too,
so a move aborts the request on the server, as without the proxy.

``check_chains`` asserts, from the wire alone and exactly (no engine determinism assumed):

* every continued piece's prompt is the original prompt's token ids plus a prefix of a
  delivered response of that prompt (a lost, duplicated or off-by-one token at a seam fails);
* every delivered response is the concatenation of its pieces' tokens in order: it is cut
  at its seams (the lengths of the continued prompts that are its prefixes) and each segment
  is the start of what a piece sent with exactly that prefix returned; the last segment is
  all of a distinct piece the server finished (so no piece is delivered twice).

It returns each delivered response's tokens with the logprobs the pieces returned, for
``engine_outputs.check_logprobs_close`` against a one-go reference.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from engine_outputs import EngineOutput

COMPLETIONS = "/v1/completions"


@dataclass(slots=True)
class WireOutput:
    """One choice of one request, as the server sent it to the router (streamed: up to where
    the router cut it, maybe a chunk more than it read)."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    top: list[dict[str, float]] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None

    def add(self, ch: dict[str, Any]) -> None:
        self.token_ids += ch.get("token_ids") or []
        self.text += ch.get("text") or ""
        lp = ch.get("logprobs") or {}
        self.tokens += lp.get("tokens") or []
        self.token_logprobs += [float(x) for x in lp.get("token_logprobs") or []]
        self.top += [dict(t or {}) for t in lp.get("top_logprobs") or []]
        if ch.get("finish_reason"):
            self.finish_reason = ch["finish_reason"]
        if ch.get("prompt_token_ids"):
            self.prompt_token_ids = list(ch["prompt_token_ids"])


@dataclass(slots=True)
class WireExchange:
    """One completions request through the proxy."""

    upstream: str
    request: dict[str, Any]
    outputs: dict[int, WireOutput] = field(default_factory=dict)
    complete: bool = False  # the whole answer was forwarded (not cut by the router)

    @property
    def sent_ids(self) -> list[int] | None:
        """The prompt as token ids (a continued piece), None for a text prompt."""
        p = self.request.get("prompt")
        return list(p) if isinstance(p, list) and all(isinstance(x, int) for x in p) else None

    def output(self, index: int) -> WireOutput:
        return self.outputs.setdefault(index, WireOutput())


class WireProxy:
    """``async with WireProxy(upstream, log) as p: p.url`` — forwards and records into
    ``log`` (shared by several proxies, in the order requests arrive)."""

    def __init__(self, upstream: str, log: list[WireExchange]) -> None:
        self.upstream = upstream.rstrip("/")
        self.log = log
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> WireProxy:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a router closing its connection cancels the upstream request
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, req: web.Request) -> web.StreamResponse:
        assert self._session is not None
        raw = await req.read()
        url = self.upstream + req.path_qs
        headers = {"Content-Type": req.headers.get("Content-Type", "application/json")}
        if req.method != "POST" or req.path != COMPLETIONS:
            async with self._session.request(req.method, url, data=raw or None,
                                             headers=headers) as up:
                return web.Response(body=await up.read(), status=up.status,
                                    content_type=up.content_type)
        body = json.loads(raw)
        ex = WireExchange(self.upstream, body)
        self.log.append(ex)
        async with self._session.post(url, data=raw, headers=headers) as up:
            if not body.get("stream"):
                data = await up.read()
                if up.status == 200:
                    for ch in json.loads(data)["choices"]:
                        ex.output(int(ch.get("index", 0))).add(ch)
                    ex.complete = True
                return web.Response(body=data, status=up.status, content_type=up.content_type)
            resp = web.StreamResponse(status=up.status)
            resp.content_type = up.content_type
            await resp.prepare(req)
            async for line in up.content:
                # recorded before it is forwarded: a router that closes the connection at the
                # last chunk cancels this handler inside the write
                text = line.decode().strip()
                if text.startswith("data:") and text != "data: [DONE]":
                    for ch in json.loads(text[5:]).get("choices") or []:
                        ex.output(int(ch.get("index", 0))).add(ch)
                await resp.write(line)
            with contextlib.suppress(ConnectionResetError):
                await resp.write_eof()
            ex.complete = up.status == 200
            return resp


@contextlib.asynccontextmanager
async def proxies(upstreams: Sequence[str]) -> Any:
    """``async with proxies(urls) as (urls_via_proxy, log)``."""
    log: list[WireExchange] = []
    async with contextlib.AsyncExitStack() as stack:
        ps = [await stack.enter_async_context(WireProxy(u, log)) for u in upstreams]
        yield [p.url for p in ps], log


@dataclass(frozen=True, slots=True)
class Segment:
    """Tokens ``[start, end)`` of a delivered response, taken from ``output``."""

    start: int
    end: int
    exchange: WireExchange
    output: WireOutput


def _prompt_ids(log: Sequence[WireExchange], prompt: str) -> list[int]:
    firsts = [o.prompt_token_ids for ex in log if ex.request.get("prompt") == prompt
              for o in ex.outputs.values() if o.prompt_token_ids]
    assert firsts, f"no first piece of {prompt!r} reached a server"
    assert all(f == firsts[0] for f in firsts), f"{prompt!r} tokenized differently"
    return list(firsts[0])


def check_chains(
    log: Sequence[WireExchange], delivered: dict[str, Sequence[Sequence[int]]],
    max_tokens: int, logprobs: dict[str, Sequence[Sequence[float] | None]] | None = None,
) -> dict[str, list[list[Segment]]]:
    """Assert the router's guarantees for ``delivered`` (prompt text -> each delivered
    response's token ids) from the wire ``log``; return each response's segments. With
    ``logprobs`` (the delivered responses' logprobs, same shape) each segment's logprobs
    must be the piece's too, exactly."""
    orig = {text: _prompt_ids(log, text) for text in delivered}
    # every continued piece in the log belongs to a delivered response, spliced exactly
    by_prefix: dict[str, dict[int, list[WireExchange]]] = {t: {0: []} for t in delivered}
    for ex in log:
        sent = ex.sent_ids
        if sent is None:
            if ex.request.get("prompt") in delivered:
                by_prefix[ex.request["prompt"]][0].append(ex)
            continue
        owner = [t for t, ids in orig.items() if sent[: len(ids)] == ids]
        assert len(owner) == 1, f"a continued prompt of {len(sent)} ids extends no prompt"
        text, n = owner[0], len(orig[owner[0]])
        tail = sent[n:]  # empty: a response restarted before its first token, sent as ids
        assert any(list(d[: len(tail)]) == tail for d in delivered[text]), (
            f"a continued prompt of {text!r} (+{len(tail)} tokens) is no delivered response's "
            "prefix: a token was lost, duplicated or changed at a seam")
        assert ex.request.get("max_tokens", max_tokens) <= max_tokens - len(tail)
        by_prefix[text].setdefault(len(tail), []).append(ex)
    out: dict[str, list[list[Segment]]] = {}
    used: set[tuple[int, int]] = set()  # (exchange, choice) delivered as a response's end
    for text, responses in delivered.items():
        n = len(orig[text])

        def pieces_at(a: int, d: list[int], text: str = text, n: int = n) -> list[
                tuple[WireExchange, int, WireOutput]]:
            return [(ex, j, o) for ex in by_prefix[text].get(a, [])
                    if ex.sent_ids is None or ex.sent_ids[n:] == d[:a]
                    for j, o in ex.outputs.items()]  # fmt: skip

        def same(o: WireOutput, a: int, b: int, d: list[int], lp: Sequence[float] | None
                 ) -> bool:
            k = b - a
            return k <= len(o.token_ids) and o.token_ids[:k] == d[a:b] and (
                lp is None or o.token_logprobs[:k] == list(lp[a:b]))

        def path(a: int, d: list[int], lp: Sequence[float] | None, text: str = text
                 ) -> list[Segment] | None:
            """Segments from token ``a`` to the end of ``d``: a piece sent with ``d[:a]``
            whose tokens start ``d[a:]``, continued at a seam, ..., the last one all of a
            piece the server finished."""
            for ex, j, o in pieces_at(a, d):
                if (o.finish_reason and len(o.token_ids) == len(d) - a
                        and same(o, a, len(d), d, lp) and (id(ex), j) not in used):
                    used.add((id(ex), j))
                    return [Segment(a, len(d), ex, o)]
            for ex, _, o in pieces_at(a, d):
                for b in sorted(k for k in by_prefix[text] if a < k < len(d)):
                    if same(o, a, b, d, lp):
                        rest = path(b, d, lp)
                        if rest is not None:
                            return [Segment(a, b, ex, o), *rest]
            return None

        out[text] = []
        lps = logprobs[text] if logprobs is not None else [None] * len(responses)
        for d, lp in zip(map(list, responses), lps, strict=True):
            assert 0 < len(d) <= max_tokens
            assert lp is None or len(lp) == len(d)
            segs = path(0, d, lp)
            assert segs is not None, (
                f"{text!r}: a delivered response of {len(d)} tokens is not the tokens of "
                f"its pieces in order (pieces sent with its prefixes: "
                f"{[(a, len(pieces_at(a, d))) for a in sorted(by_prefix[text])]})")
            out[text].append(segs)
    return out


def as_engine_output(d: Sequence[int], segs: Sequence[Segment]) -> EngineOutput:
    """A delivered response with the logprobs its pieces returned (logprobs requested)."""
    tokens, lps, top = [], [], []
    for s in segs:
        n = s.end - s.start
        tokens += s.output.tokens[:n]
        lps += s.output.token_logprobs[:n]
        top += s.output.top[:n]
    return EngineOutput(tuple(d), tuple(tokens), tuple(lps), tuple(top))

