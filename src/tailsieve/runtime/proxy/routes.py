"""The proxy's HTTP routes (aiohttp).

Generation: ``POST /v1/completions``, ``/v1/chat/completions`` (vLLM's OpenAI API) and
``/generate`` (SGLang's). Service: ``GET /v1/models`` (the servers' card), ``/health`` (200
while a server that answered is in service, else 503; its JSON lists the servers, in or out,
since when and why), ``/metrics`` (Prometheus), ``POST /tokenize`` and ``/detokenize`` (passed
to a healthy server). SGLang Model Gateway's worker API, which slime calls: ``POST /workers``
(a server registers), ``DELETE /workers/{id}``, ``GET /workers`` (the proxy lists itself, so
that slime's abort reaches it), ``POST /abort_request`` (``rid`` or ``abort_all``: running
samples end with what their finished pieces generated) and ``GET /v1/loads`` (samples
running, per server). vLLM router's ``POST /finish_session`` (``?session_id=`` or JSON
``{"session_id": ...}``: the client's session key ended; its sessions end at once, a running
one with its turn). ``ProxyConfig.fan_out_paths`` (weight reloads, cache resets) are sent on
to every server in service.

Admin calls (registering or removing servers, ``abort_all``, the fan-out paths) pass on the
admin listener's app (``build_app(..., trusted=True)``) and, on the data listener's, only with
the admin token (``guard.FrontDoor.check_admin``); an abort naming a ``rid`` is a data call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from tailsieve.runtime.engine.transport import ReplicaError, RequestError, Transport
from tailsieve.runtime.proxy.api_error import ApiError, bad_request, unavailable
from tailsieve.runtime.proxy.config import ProxyConfig
from tailsieve.runtime.proxy.generation import handle, read_json
from tailsieve.runtime.proxy.guard import FRONT, ROUTE, TRUSTED, FrontDoor
from tailsieve.runtime.proxy.metrics import CONTENT_TYPE_LATEST, ProxyMetrics
from tailsieve.runtime.proxy.request import Api
from tailsieve.runtime.proxy.service import ProxyService

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ProxyState(Protocol):
    """What the routes read of the proxy (``server.RoutingProxy``)."""

    config: ProxyConfig
    endpoints: list[str]
    service: ProxyService | None
    metrics: ProxyMetrics
    front: FrontDoor
    transport: Transport

    async def serving(self) -> ProxyService: ...

    async def register(self, url: str) -> int: ...

    def deregister(self, worker: str) -> str: ...

    def servers(self) -> list[dict[str, Any]]: ...


class Routes:
    """The handlers over one proxy's state."""

    def __init__(self, state: ProxyState) -> None:
        self.s = state

    def counted(self, route: str, fn: Handler) -> Handler:
        """``fn`` counted under ``route`` (the front door counts and answers errors)."""
        async def wrapped(request: web.Request) -> web.StreamResponse:
            request[ROUTE] = route
            return await fn(request)

        return wrapped

    def admin(self, fn: Handler) -> Handler:
        """``fn`` as an admin call (401 / 403 on the data listener without the token)."""
        async def checked(request: web.Request) -> web.StreamResponse:
            self.s.front.check_admin(request, request.app[TRUSTED])
            return await fn(request)

        return checked

    def generation(self, api: Api) -> Handler:
        async def run(request: web.Request) -> web.StreamResponse:
            svc = await self.s.serving()
            cfg = self.s.config
            return await handle(request, api, svc, cfg.session_headers, cfg.group_headers)

        return self.counted(api.value, run)

    async def models(self, request: web.Request) -> web.StreamResponse:
        svc = await self.s.serving()
        card = svc.served.card
        if card is None:
            card = {"object": "list", "data": [{
                "id": svc.served.name, "object": "model", "created": int(time.time()),
                "owned_by": "tailsieve", "root": svc.served.name, "parent": None,
                "max_model_len": svc.served.max_model_len, "permission": []}]}
        return web.json_response(card)

    async def health(self, request: web.Request) -> web.StreamResponse:
        svc = self.s.service
        servers = self.s.servers()
        why = None
        if svc is None:
            why = (f"{len(self.s.endpoints)} of {self.s.config.num_servers} servers have "
                   "registered")
        elif not any(s["in_service"] for s in servers):
            why = "no server is in service: " + "; ".join(
                f"{s['url']}: {s['last_error'] or 'not answered yet'}" for s in servers)
        if why is not None:
            return web.json_response({**unavailable(why).body(), "servers": servers},
                                     status=503)
        return web.json_response({"status": "ok", "servers": servers})

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=self.s.metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def forward(self, request: web.Request) -> web.StreamResponse:
        """``/tokenize`` and ``/detokenize``: answered by a healthy server."""
        body = await read_json(request)
        svc = await self.s.serving()
        ok = svc.gateway.healthy()
        for r, base in enumerate(self.s.endpoints):
            if not ok[r]:
                continue
            try:
                out = await self.s.transport.post_json(base + request.path, body,
                                                       self.s.config.tokenize_timeout_s)
            except RequestError as exc:
                if exc.status is not None and 400 <= exc.status < 500:
                    raise ApiError(str(exc), exc.status) from None
                continue
            except ReplicaError:
                continue
            return web.json_response(out)
        raise unavailable(f"no healthy server answered {request.path}")

    async def fan_out(self, request: web.Request) -> web.StreamResponse:
        """A POST every server must get (a weight reload, a cache reset): sent to each in
        service; 200 when all answered 2xx, else 502 naming the ones that did not."""
        body = await read_json(request, allow_empty=True)
        svc = await self.s.serving()
        ok = svc.gateway.healthy()
        timeout = self.s.config.gateway.request_timeout_s
        results: list[dict[str, Any]] = []
        for r, base in enumerate(self.s.endpoints):
            if not ok[r]:
                results.append({"url": base, "status": None, "error": "out of service"})
                continue
            try:
                out = await self.s.transport.post_json(base + request.path, body, timeout)
                results.append({"url": base, "status": 200, "answer": out})
            except RequestError as exc:
                results.append({"url": base, "status": exc.status, "error": str(exc)})
            except ReplicaError as exc:
                results.append({"url": base, "status": None, "error": str(exc)})
        bad = [x for x in results if x["status"] != 200 and x.get("error") != "out of service"]
        if bad:
            raise ApiError(f"{request.path} failed on {len(bad)} of {len(results)} servers: "
                           + "; ".join(str(x["error"]) for x in bad), 502, "BadGatewayError")
        return web.json_response({"servers": results})

    async def add_worker(self, request: web.Request) -> web.StreamResponse:
        url = request.query.get("url")
        if url is None:
            body = await read_json(request)
            url = body.get("url") if isinstance(body, dict) else None
        if not isinstance(url, str):
            raise bad_request("give the worker's url (JSON {\"url\": ...} or ?url=)", "url")
        i = await self.s.register(url)
        return web.json_response({"status": "accepted", "worker_id": str(i), "url": url},
                                 status=202)

    async def remove_worker(self, request: web.Request) -> web.StreamResponse:
        url = self.s.deregister(request.match_info["worker"])
        return web.json_response({"status": "removed", "url": url})

    async def workers(self, request: web.Request) -> web.StreamResponse:
        svc = self.s.service
        running = svc.num_running_samples if svc is not None else 0
        ok = svc.gateway.healthy() if svc is not None else ()
        me = {"id": "tailsieve-proxy", "url": f"{request.scheme}://{request.host}",
              "model_id": svc.served.name if svc is not None else None,
              "worker_type": "regular", "is_healthy": any(ok), "load": running,
              "servers": [{"id": str(i), "url": u, "is_healthy": bool(ok[i]) if ok else False}
                          for i, u in enumerate(self.s.endpoints)]}
        return web.json_response({"workers": [me], "total": 1})

    async def abort(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        abort_all = bool(body.get("abort_all"))
        if abort_all:
            self.s.front.check_admin(request, request.app[TRUSTED])
        rid = body.get("rid")
        if not abort_all and not isinstance(rid, str):
            raise bad_request("give the 'rid' of the request to abort (a string)", "rid")
        svc = self.s.service
        n = svc.abort(rid, abort_all) if svc is not None else 0
        return web.json_response({"aborted": n})

    async def finish_session(self, request: web.Request) -> web.StreamResponse:
        key = request.query.get("session_id")
        if key is None:
            body = await read_json(request, allow_empty=True)
            key = body.get("session_id") if isinstance(body, dict) else None
        if not isinstance(key, str) or not key:
            raise bad_request("give the session id (?session_id= or JSON {\"session_id\": "
                              "...})", "session_id")
        svc = self.s.service
        n = svc.finish_session(key) if svc is not None else 0
        return web.json_response({"status": "ok", "session_id": key, "ended": n})

    async def loads(self, request: web.Request) -> web.StreamResponse:
        svc = self.s.service
        loads: list[dict[str, Any]] = []
        if svc is not None:
            for r in svc.gateway.stats().replicas:
                loads.append({"dp_rank": r.replica, "num_running_reqs": r.num_running,
                              "num_waiting_reqs": r.num_waiting,
                              "num_total_reqs": r.num_running + r.num_waiting})
        return web.json_response({"timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                             time.gmtime()),
                                  "version": "tailsieve-proxy", "loads": loads})


def build_app(state: ProxyState, trusted: bool = False) -> web.Application:
    """The aiohttp application of one of the proxy's listeners: ``trusted`` for the admin
    listener (admin calls need no token there)."""
    r = Routes(state)
    app = web.Application(client_max_size=state.config.max_body_bytes,
                          middlewares=[state.front.middleware])
    app[FRONT] = state.front
    app[TRUSTED] = trusted
    app.router.add_post("/v1/completions", r.generation(Api.COMPLETIONS))
    app.router.add_post("/v1/chat/completions", r.generation(Api.CHAT))
    app.router.add_post("/generate", r.generation(Api.GENERATE))
    for path, fn in (("/v1/models", r.models), ("/health", r.health),
                     ("/metrics", r.metrics), ("/workers", r.workers),
                     ("/v1/loads", r.loads)):
        app.router.add_get(path, r.counted(path, fn))
    posts: tuple[tuple[str, Handler], ...] = (
        ("/tokenize", r.forward), ("/detokenize", r.forward), ("/abort_request", r.abort),
        ("/finish_session", r.finish_session),
        ("/workers", r.admin(r.add_worker)), ("/add_worker", r.admin(r.add_worker)))
    for path, post in posts:
        app.router.add_post(path, r.counted(path, post))
    app.router.add_delete("/workers/{worker}", r.counted("/workers", r.admin(r.remove_worker)))
    for path in state.config.fan_out_paths:
        app.router.add_post(path, r.counted(path, r.admin(r.fan_out)))
    return app
