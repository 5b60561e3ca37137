"""The proxy's front door: what every request meets before and after its route.

``FrontDoor.middleware`` answers every error as vLLM's JSON error body (``ApiError``s, aiohttp's
own 404 / 405 / 413, and anything unexpected as a 500), counts every answer
(``tailsieve_proxy_requests_total{route, code}``, route ``unmatched`` when none matched) and
every refusal by its reason (``tailsieve_proxy_refusals_total{route, reason}``), and admits
at most ``ProxyConfig.max_concurrency`` generation requests at once (429 beyond). ``read_json``
reads a body within ``read_timeout_s`` (408), at most ``max_body_bytes`` (413), nested at most
``max_json_depth`` deep (400). ``check_admin`` lets an admin call through on a trusted
(admin) listener, or with the admin token on the data listener (401 without it or with a
wrong one, 403 when no token is set). The header read timeout is aiohttp's keep-alive timeout,
which also closes a connection that never completes its first request
(``RoutingProxy.start``).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tailsieve.runtime.proxy.api_error import ApiError, bad_request
from tailsieve.runtime.proxy.config import ProxyConfig
from tailsieve.runtime.proxy.metrics import ProxyMetrics

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ROUTE = web.RequestKey("tailsieve.route", str)  # its route label (``Routes.counted``)
GENERATION_PATHS = frozenset(("/v1/completions", "/v1/chat/completions", "/generate"))
ADMIN_HEADER = "X-Admin-Token"  # or ``Authorization: Bearer <token>``
_STRING_OR_BRACKET = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_OPEN = frozenset(b"[{")




class FrontDoor:
    """The checks every request of one proxy meets (see the module docstring); one per proxy,
    shared by its listeners."""

    def __init__(self, config: ProxyConfig, metrics: ProxyMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self.num_in_flight = 0  # generation requests being answered

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        admitted = request.method == "POST" and request.path in GENERATION_PATHS
        try:
            if admitted:
                self._admit()
            try:
                resp = await handler(request)
            finally:
                if admitted:
                    self.num_in_flight -= 1
        except ApiError as err:
            resp = self._refuse(request, err)
        except ConnectionError:
            raise  # the client went away: nothing to answer
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            resp = self._refuse(request, _http_error(request, exc, self.config.max_body_bytes))
            if "Allow" in exc.headers:
                resp.headers["Allow"] = exc.headers["Allow"]
        except Exception as exc:
            log.exception("proxy: %s %s failed", request.method, request.path)
            resp = self._refuse(request, ApiError(
                f"internal error: {type(exc).__name__}: {exc}", 500, "InternalServerError"))
        self.metrics.count(request.get(ROUTE, "unmatched"), resp.status)
        return resp

    def _admit(self) -> None:
        limit = self.config.max_concurrency
        if limit is not None and self.num_in_flight >= limit:
            raise ApiError(f"the proxy is answering {self.num_in_flight} generation requests, "
                           f"its limit (--max-concurrency {limit}); retry later", 429,
                           "TooManyRequestsError", reason="max_concurrency")
        self.num_in_flight += 1

    def _refuse(self, request: web.Request, err: ApiError) -> web.Response:
        self.metrics.refuse(request.get(ROUTE, "unmatched"), err.reason)
        resp = web.json_response(err.body(), status=err.status)
        if err.status == 401:
            resp.headers["WWW-Authenticate"] = "Bearer"
        return resp

    async def read_json(self, request: web.Request, allow_empty: bool = False) -> Any:
        """The request's JSON body (see the module docstring for the limits); ``{}`` for an
        empty one when ``allow_empty``."""
        cfg = self.config
        size = request.content_length
        if size is not None and size > cfg.max_body_bytes:
            raise _too_large(size, cfg.max_body_bytes)
        try:
            if request.content.is_eof():  # it came with the headers: no timer needed
                raw = await request.read()
            else:
                async with asyncio.timeout(cfg.read_timeout_s):
                    raw = await request.read()
        except TimeoutError:
            raise ApiError(f"the request body did not arrive within {cfg.read_timeout_s:g} s",
                           408, "RequestTimeoutError", reason="read_timeout") from None
        except web.HTTPRequestEntityTooLarge:
            raise _too_large(None, cfg.max_body_bytes) from None
        if allow_empty and not raw.strip():
            return {}
        if json_too_deep(raw, cfg.max_json_depth):
            raise bad_request(f"the request body's JSON is nested deeper than "
                              f"{cfg.max_json_depth} levels", reason="json_depth")
        try:
            return json.loads(raw)
        except RecursionError:
            raise bad_request("the request body's JSON is nested too deeply",
                              reason="json_depth") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}",
                              reason="bad_json") from None

    def check_admin(self, request: web.Request, trusted: bool) -> None:
        """Let an admin call through, or raise its 401 / 403 (see the module docstring)."""
        if trusted:
            return
        token = self.config.admin_token
        what = f"{request.method} {request.path}"
        if token is None:
            raise ApiError(f"{what} is an admin call, refused on this listener: send it to the "
                           "admin listener (tailsieve serve --admin-port, loopback by default) "
                           "or start the proxy with --admin-token", 403,
                           "PermissionDeniedError", reason="forbidden")
        given = request.headers.get(ADMIN_HEADER)
        auth = request.headers.get("Authorization", "")
        if given is None and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if given is None or not hmac.compare_digest(given.encode(), token.encode()):
            raise ApiError(f"{what} is an admin call: it needs the admin token "
                           f"(Authorization: Bearer <token> or {ADMIN_HEADER}); "
                           + ("none was given" if given is None else "the one given is wrong"),
                           401, "AuthenticationError", reason="unauthorized")


def json_too_deep(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays / objects deeper than ``limit`` (brackets
    inside strings do not count). Linear, at C speed for bodies with few brackets."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for m in _STRING_OR_BRACKET.finditer(raw):
        c = m.group()[0]
        if c in _OPEN:
            depth += 1
            if depth > limit:
                return True
        elif c != 0x22:  # a closing bracket (0x22: a string)
            depth -= 1
    return False


FRONT = web.AppKey("tailsieve.front", FrontDoor)  # the app's front door (``read_json``)
TRUSTED = web.AppKey("tailsieve.trusted", bool)  # the app is the admin listener's


def _too_large(size: int | None, limit: int) -> ApiError:
    got = f" ({size} bytes)" if size is not None else ""
    return ApiError(f"the request body{got} is larger than the proxy's limit of {limit} bytes "
                    "(tailsieve serve --max-body-mb)", 413, "RequestEntityTooLargeError",
                    reason="body_too_large")


def _http_error(request: web.Request, exc: web.HTTPException, max_body_bytes: int,
                ) -> ApiError:
    what = f"{request.method} {request.path}"
    if exc.status == 404:
        return ApiError(f"no route {what} (the proxy's routes are in docs/proxy.md)", 404,
                        "NotFoundError", reason="not_found")
    if exc.status == 405:
        allowed = exc.headers.get("Allow", "")
        return ApiError(f"method {request.method} is not allowed on {request.path}"
                        + (f" (allowed: {allowed})" if allowed else ""), 405,
                        "MethodNotAllowedError", reason="method_not_allowed")
    if exc.status == 413:
        return _too_large(request.content_length, max_body_bytes)
    return ApiError(f"{what}: {exc.reason}", exc.status, type(exc).__name__.removeprefix("HTTP")
                    + "Error")
