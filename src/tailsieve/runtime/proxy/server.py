"""``RoutingProxy``: the HTTP routing proxy ``tailsieve serve`` runs (an aiohttp server).

::

    async with RoutingProxy(ProxyConfig(endpoints=("http://10.0.0.1:8000", ...))) as proxy:
        await proxy.start("127.0.0.1", 8800)      # serves until closed

It speaks vLLM's ``/v1/completions`` and ``/v1/chat/completions`` and SGLang's ``/generate``
(``proxy.routes``), runs every request as turns of client sessions at a ``SessionGateway``
(``proxy.service``) and answers in the servers' own shapes. With ``num_workers`` instead of
endpoints it waits for the servers to register (``POST /workers {"url"}``, as slime's engines
do with the SGLang Model Gateway) and starts once they all have. Tests may give their own
``runner`` (e.g. ``StubPieceRunner``), ``tokenizer`` and ``served`` model instead of servers.
The ``transport`` (given or made) is closed with the proxy.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tailsieve.errors import ConfigError
from tailsieve.runtime.backends import Backend
from tailsieve.runtime.lean_http import LeanTransport
from tailsieve.runtime.proxy.api_error import ApiError, bad_request, unavailable
from tailsieve.runtime.proxy.config import ProxyConfig
from tailsieve.runtime.proxy.metrics import ProxyMetrics
from tailsieve.runtime.proxy.routes import build_app
from tailsieve.runtime.proxy.runner import CapturingTransport, DetailRunner
from tailsieve.runtime.proxy.service import ProxyService, ServedModel
from tailsieve.runtime.proxy.tokenizer import HttpTokenizer, Tokenizer
from tailsieve.runtime.sessions.gateway import SessionGateway
from tailsieve.runtime.sessions.http_runner import HttpPieceRunner
from tailsieve.runtime.sessions.pieces import PieceRunner
from tailsieve.runtime.transport import ReplicaError, Transport
from tailsieve.session.client_table import ClientSessions

log = logging.getLogger(__name__)
MODEL_TIMEOUT_S = 10.0


class RoutingProxy:
    """The proxy (see the module docstring)."""

    def __init__(self, config: ProxyConfig, runner: PieceRunner | None = None,
                 tokenizer: Tokenizer | None = None, served: ServedModel | None = None,
                 transport: Transport | None = None) -> None:
        if (runner is None) != (tokenizer is None) or (runner is None) != (served is None):
            raise ConfigError("give runner, tokenizer and served together (or none of them)")
        if runner is not None and not config.endpoints:
            raise ConfigError("a given runner needs the endpoints it serves (names for them)")
        self.config = config
        self.endpoints: list[str] = list(config.endpoints)
        self._runner = runner
        self._tokenizer = tokenizer
        self._served = served
        self.transport: Transport = transport or LeanTransport()
        self.service: ProxyService | None = None
        self.gateway: SessionGateway | None = None
        self.ready = asyncio.Event()
        self._build_lock = asyncio.Lock()
        self._build_error: BaseException | None = None
        gw = config.gateway
        self.metrics = ProxyMetrics(lambda: self.service, lambda: self.endpoints, gw.profile,
                                    self._profile_in_use)
        self.app = build_app(self)
        self._site_runner: web.AppRunner | None = None
        self.url = ""

    def _profile_in_use(self) -> str:
        gw = self.config.gateway
        if self.gateway is not None:
            return self.gateway.profile.in_use
        return gw.unfitted_profile

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> RoutingProxy:
        if len(self.endpoints) == self.config.num_servers:
            await self._build()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (0: a free port); returns the proxy's base URL."""
        self._site_runner = web.AppRunner(self.app, handler_cancellation=True,
                                          access_log=None)
        await self._site_runner.setup()
        await web.TCPSite(self._site_runner, host, port).start()
        bound = self._site_runner.addresses[0][1]
        self.url = f"http://{host}:{bound}"
        return self.url

    async def aclose(self) -> None:
        if self._site_runner is not None:
            await self._site_runner.cleanup()
            self._site_runner = None
        if self.service is not None:
            await self.service.aclose()
        if self.gateway is not None:
            await self.gateway.aclose()
        await self.transport.aclose()

    # -- the servers ------------------------------------------------------------------------

    async def _build(self) -> None:
        """Make the gateway and the service over ``self.endpoints`` (once)."""
        async with self._build_lock:
            if self.service is not None:
                return
            cfg = self.config
            runner, tokenizer, served = self._runner, self._tokenizer, self._served
            if runner is None:
                served = await self._served_model()
                capture = CapturingTransport(self.transport)
                runner = DetailRunner(HttpPieceRunner(
                    self.endpoints, cfg.backend, served.name, capture,
                    request_timeout_s=cfg.gateway.request_timeout_s), capture)
            assert served is not None
            gw = SessionGateway(len(self.endpoints), runner, cfg.gateway)
            await gw.__aenter__()
            if tokenizer is None:
                model = served.name if cfg.backend is Backend.VLLM else None
                tokenizer = HttpTokenizer(self.endpoints, self.transport, model, gw.healthy,
                                          cfg.tokenize_timeout_s)
            self.gateway = gw
            self.service = ProxyService(gw, tokenizer, served, cfg.backend,
                                        ClientSessions(cfg.session_ttl_s),
                                        cfg.gate_window_turns)
            self.service.start_expiry()
            self.ready.set()
            log.info("proxy: serving %s over %d servers", served.name, len(self.endpoints))

    async def _served_model(self) -> ServedModel:
        """The model card of the first server that lists one (``config.model`` names it)."""
        errors = []
        for base in self.endpoints:
            try:
                status, text = await self.transport.get(base + "/v1/models", MODEL_TIMEOUT_S)
            except ReplicaError as exc:
                errors.append(str(exc))
                continue
            card = _card(text) if status == 200 else None
            rows = card.get("data") if card else None
            if rows:
                row = rows[0]
                name = self.config.model or str(row.get("id"))
                mml = row.get("max_model_len")
                return ServedModel(name, mml if isinstance(mml, int) else None, card)
            errors.append(f"{base}/v1/models: HTTP {status}")
        if self.config.model is not None:
            return ServedModel(self.config.model)
        raise ConfigError("cannot tell which model the servers serve ("
                          + "; ".join(errors) + "); pass --model NAME")

    async def serving(self) -> ProxyService:
        """The service, once the servers are known (HTTP 503 if they do not register in
        ``ready_timeout_s``)."""
        if self.service is not None:
            return self.service
        try:
            await asyncio.wait_for(self.ready.wait(), self.config.ready_timeout_s)
        except TimeoutError:
            raise unavailable(f"{len(self.endpoints)} of {self.config.num_servers} servers have "
                              "registered (POST /workers)") from None
        assert self.service is not None
        return self.service

    async def register(self, url: str) -> int:
        """A server registers (``POST /workers``): returns its index. A known URL returns to
        service; a new one is added until ``num_workers`` are known."""
        url = url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise bad_request(f"worker url must be an http(s):// URL, got {url!r}", "url")
        if url in self.endpoints:
            i = self.endpoints.index(url)
            if self.gateway is not None:
                self.gateway.set_healthy(i, True)
            return i
        if len(self.endpoints) >= self.config.num_servers:
            raise ApiError(f"the proxy serves {self.config.num_servers} servers and all are "
                           f"registered; {url} is not one of them (restart it with "
                           "--num-workers or --endpoints that include it)", 409, "ConflictError")
        self.endpoints.append(url)
        if len(self.endpoints) == self.config.num_servers:
            try:
                await self._build()
            except (ConfigError, ReplicaError) as exc:
                self.endpoints.pop()
                raise unavailable(f"cannot start over the registered servers: {exc}") from None
        return len(self.endpoints) - 1

    def deregister(self, worker: str) -> str:
        """A server leaves (``DELETE /workers/{id}``): it takes no new pieces."""
        i = self._worker_index(worker)
        if self.gateway is not None:
            self.gateway.set_healthy(i, False)
        return self.endpoints[i]

    def _worker_index(self, worker: str) -> int:
        if worker.isdigit() and int(worker) < len(self.endpoints):
            return int(worker)
        url = worker.rstrip("/")
        if url in self.endpoints:
            return self.endpoints.index(url)
        raise ApiError(f"no worker {worker!r}", 404, "NotFoundError")


def _card(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


async def serve(config: ProxyConfig, host: str = "127.0.0.1", port: int = 8800,
                announce: Callable[[str], None] | None = None) -> None:
    """Run the proxy until SIGINT / SIGTERM. ``announce`` is told one line once it listens
    (its URL, the servers, the policy and why moves are off, if they are)."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with RoutingProxy(config) as proxy:
        try:
            url = await proxy.start(host, port)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        if announce is not None:
            announce(describe(proxy, url))
        await stop.wait()


def describe(proxy: RoutingProxy, url: str) -> str:
    """One line about a started proxy."""
    cfg = proxy.config
    gw = cfg.gateway
    servers = (f"{len(cfg.endpoints)} {cfg.backend.value} servers" if cfg.endpoints else
               f"waiting for {cfg.num_workers} {cfg.backend.value} servers to POST /workers")
    profile = f"{gw.profile} (using {gw.unfitted_profile})" if gw.fits_profile else gw.profile
    why = proxy.gateway.moves_off_reason if proxy.gateway is not None else gw.moves_off_reason
    moves = "moves on" if why is None else f"moves off: {why}"
    return (f"tailsieve serve: listening on {url} ({servers}; policy {gw.policy.value}; "
            f"profile {profile}; {moves})")
