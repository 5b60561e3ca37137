"""``RoutingProxy``: the HTTP routing proxy ``tailsieve serve`` runs (an aiohttp server).

::

    async with RoutingProxy(ProxyConfig(endpoints=("http://10.0.0.1:8000", ...))) as proxy:
        await proxy.start("127.0.0.1", 8800)      # serves until closed
        await proxy.start_admin("127.0.0.1", 8801)  # optional: the admin listener

It speaks vLLM's ``/v1/completions`` and ``/v1/chat/completions`` and SGLang's ``/generate``
(``proxy.routes``), runs every request as turns of client sessions at a ``SessionGateway``
(``proxy.service``) and answers in the servers' own shapes. With ``num_workers`` instead of
endpoints it waits for the servers to register (``POST /workers {"url"}``, as slime's engines
do with the SGLang Model Gateway) and starts once they all have. Tests may give their own
``runner`` (e.g. ``StubPieceRunner``), ``tokenizer`` and ``served`` model instead of servers.
The ``transport`` (given or made) is closed with the proxy.

Admin calls (``POST /workers``, ``DELETE /workers/{id}``, ``abort_all``, weight reloads) are
served on the admin listener (``start_admin``, loopback by default), and on the data listener
only with ``ProxyConfig.admin_token``. Every server is probed (``GET /health``) before the
proxy serves: one that does not answer starts out of service until it does, so ``/health`` is
503 until a server has answered.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.lean_http import LeanTransport
from tailsieve.runtime.engine.pieces import HealthProbe, PieceRunner
from tailsieve.runtime.engine.transport import ReplicaError, Transport
from tailsieve.runtime.proxy.api_error import ApiError, bad_request, unavailable
from tailsieve.runtime.proxy.config import ProxyConfig
from tailsieve.runtime.proxy.guard import FrontDoor
from tailsieve.runtime.proxy.metrics import ProxyMetrics
from tailsieve.runtime.proxy.routes import build_app
from tailsieve.runtime.proxy.service import ProxyService, ServedModel
from tailsieve.runtime.proxy.tokenizer import HttpTokenizer, Tokenizer
from tailsieve.runtime.sessions.gateway import SessionGateway
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
        gw = config.gateway
        self.metrics = ProxyMetrics(lambda: self.service, lambda: self.endpoints, gw.profile,
                                    self._profile_in_use)
        self.front = FrontDoor(config, self.metrics)
        self.app = build_app(self)
        self.admin_app = build_app(self, trusted=True)
        self._site_runners: list[web.AppRunner] = []
        self.url = ""
        self.admin_url = ""

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
        self.url = await self._listen(self.app, host, port)
        return self.url

    async def start_admin(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen for admin calls (and every other route) on ``host:port``; returns its URL.
        Whoever reaches it can register and remove servers and abort every request."""
        self.admin_url = await self._listen(self.admin_app, host, port)
        return self.admin_url

    async def _listen(self, app: web.Application, host: str, port: int) -> str:
        # keepalive_timeout also closes a connection whose request headers do not arrive
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                               keepalive_timeout=self.config.read_timeout_s)
        await runner.setup()
        self._site_runners.append(runner)
        await web.TCPSite(runner, host, port).start()
        return f"http://{host}:{runner.addresses[-1][1]}"

    async def aclose(self) -> None:
        while self._site_runners:
            await self._site_runners.pop().cleanup()
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
                runner = HttpPieceRunner(
                    self.endpoints, cfg.backend, served.name, self.transport,
                    request_timeout_s=cfg.gateway.request_timeout_s,
                    tokenize_timeout_s=cfg.tokenize_timeout_s, stream=cfg.gateway.stream,
                    stream_interval=cfg.gateway.stream_interval)
            assert served is not None
            gw = SessionGateway(len(self.endpoints), runner, cfg.gateway)
            await gw.__aenter__()
            if isinstance(runner, HealthProbe):
                await _first_probe(gw, runner)
            if tokenizer is None:  # given with the runner, or made with it here
                assert isinstance(runner, HttpPieceRunner)
                tokenizer = HttpTokenizer(runner, gw.healthy)
            self.gateway = gw
            self.service = ProxyService(gw, tokenizer, served, cfg.backend,
                                        ClientSessions(cfg.session_ttl_s),
                                        cfg.gate_window_turns, cfg.text_prompts)
            self.service.start_expiry()
            self.ready.set()
            log.info("proxy: serving %s over %d servers", served.name, len(self.endpoints))

    async def _served_model(self) -> ServedModel:
        """The model card of the first server that lists one (``config.model`` names it)."""
        errors = []
        asker = HttpPieceRunner(self.endpoints, self.config.backend, transport=self.transport,
                                health_timeout_s=MODEL_TIMEOUT_S)
        for i, base in enumerate(self.endpoints):
            try:
                card = await asker.models.card(i)
            except ReplicaError as exc:
                errors.append(str(exc))
                continue
            if card is not None:
                return ServedModel(self.config.model or card.name, card.max_model_len, card.raw)
            errors.append(f"{base} lists no model")
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
            self.gateway.health.last_error[i] = "Removed: DELETE /workers"
        return self.endpoints[i]

    def servers(self) -> list[dict[str, Any]]:
        """Each server: its id, URL, whether it is in service, since when (UTC) and the
        last fault that took it out."""
        gw = self.gateway
        out: list[dict[str, Any]] = []
        for i, url in enumerate(self.endpoints):
            row: dict[str, Any] = {"id": str(i), "url": url, "in_service": False,
                                   "since": None, "last_error": None}
            if gw is not None:
                h = gw.health
                row.update(in_service=h.healthy[i], last_error=h.last_error[i],
                           since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(h.since_s[i])))
            out.append(row)
        return out

    def _worker_index(self, worker: str) -> int:
        if worker.isdigit() and int(worker) < len(self.endpoints):
            return int(worker)
        url = worker.rstrip("/")
        if url in self.endpoints:
            return self.endpoints.index(url)
        raise ApiError(f"no worker {worker!r}", 404, "NotFoundError")


async def _first_probe(gw: SessionGateway, runner: HealthProbe) -> None:
    """Probe every server once: one that does not answer is taken out (and probed until it
    does, as after a fault)."""
    oks = await asyncio.gather(*(runner.probe(r) for r in range(gw.num_replicas)),
                               return_exceptions=True)
    for r, ok in enumerate(oks):
        if ok is not True:
            gw.health.down(r, ok if isinstance(ok, Exception) else ReplicaError(
                "did not answer the start-up probe (GET /health)"))


async def serve(config: ProxyConfig, host: str = "127.0.0.1", port: int = 8800,
                announce: Callable[[str], None] | None = None, admin_host: str = "127.0.0.1",
                admin_port: int | None = None) -> None:
    """Run the proxy until SIGINT / SIGTERM, with an admin listener on ``admin_host:
    admin_port`` when a port is given. ``announce`` is told one line once it listens (its
    URLs, the servers, the policy and why moves are off, if they are)."""
    import signal

    if config.num_workers and not config.endpoints and admin_port is None \
            and config.admin_token is None:
        raise ConfigError("servers register with POST /workers, an admin call: give "
                          "--admin-port (an admin listener, loopback by default) or "
                          "--admin-token")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with RoutingProxy(config) as proxy:
        for h, p, start in ((host, port, proxy.start), (admin_host, admin_port,
                                                          proxy.start_admin)):
            if p is None:
                continue
            try:
                await start(h, p)
            except OSError as exc:
                raise ConfigError(f"cannot listen on {h}:{p}: {exc.strerror or exc}") from None
        url = proxy.url
        if announce is not None:
            announce(describe(proxy, url))
        gc.freeze()  # what startup made lives as long as the proxy: out of the collector's scans
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
    admin = (f"admin calls on {proxy.admin_url}" if proxy.admin_url else
             "admin calls with the token" if cfg.admin_token else "admin calls refused")
    return (f"tailsieve serve: listening on {url} ({servers}; {admin}; policy "
            f"{gw.policy.value}; profile {profile}; {moves})")
