"""The live executor's replicas: their addresses and health (``runtime.execution.health``), the engine
client every request goes through (``HttpPieceRunner``), and what a step needs of them before
it starts (the served model's name, chat prompts as token ids, a request priority taken).
``LiveExecutor`` runs steps over them (``runtime.step.executor``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from tailsieve.errors import ConfigError, ReplicaError, StepFailedError
from tailsieve.runtime.engine.backends import Backend, PromptInput
from tailsieve.runtime.engine.faults import ReplicaDownError
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.lean_http import LeanTransport
from tailsieve.runtime.engine.transport import Transport, probe_health
from tailsieve.runtime.execution.health import ReplicaHealth, ReplicaState
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.tasks import gather_all

__all__ = ["ReplicaSet"]
PRIORITY_CHECK_S = 60.0  # the start-up check of drain priority waits this long per replica


class ReplicaSet:
    """A fixed number of inference replicas, by index, at addresses that may change
    (``addresses()`` returns the current base URL of each, same count and order)."""

    def __init__(self, endpoints: Sequence[str], config: ExecutorConfig,
                 transport: Transport | None = None,
                 addresses: Callable[[], Sequence[str]] | None = None) -> None:
        if not endpoints:
            raise ConfigError("need at least one endpoint")
        self.config = config
        self._transport: Transport = transport or LeanTransport()
        self.health = ReplicaHealth(endpoints, self._probe_one, config.probe_interval_s)
        self._addresses = addresses
        self.runner: HttpPieceRunner | None = None  # the engine client (built for the config
        # of the step that needs it)
        self._runner_config: ExecutorConfig | None = None

    @property
    def num_replicas(self) -> int:
        return len(self.health)

    @property
    def replicas(self) -> list[ReplicaState]:
        """Each replica's health (``runtime.execution.health``), a snapshot."""
        return [self.health.state(i) for i in range(len(self.health))]

    @property
    def num_readmitted(self) -> int:
        """Replicas returned to service by a probe."""
        return self.health.num_readmitted

    @property
    def healthy(self) -> tuple[bool, ...]:
        return tuple(self.health.healthy)

    @property
    def healthy_indices(self) -> list[int]:
        return [i for i, ok in enumerate(self.health.healthy) if ok]

    def refresh_addresses(self) -> list[int]:
        """Poll ``addresses``; a replica whose URL changed is taken out (to be probed at its new
        address). Returns the indices that moved."""
        if self._addresses is None:
            return []
        urls = [u.rstrip("/") for u in self._addresses()]
        if len(urls) != len(self.health):
            raise ConfigError(
                f"address provider returned {len(urls)} addresses for {len(self.health)} replicas"
            )
        moved = [i for i, (u, v) in enumerate(zip(self.health.urls, urls, strict=True)) if u != v]
        for i in moved:
            self.health.move(i, urls[i])
            if self.runner is not None:
                self.runner.endpoints[i] = urls[i]
        return moved

    async def probe(self, only_unhealthy: bool = True) -> tuple[bool, ...]:
        """GET /health on (unhealthy) replicas; a 200 returns a replica to service."""
        self.refresh_addresses()
        await asyncio.gather(*(self.health.probe(i) for i, ok in enumerate(self.health.healthy)
                               if not ok or not only_unhealthy))
        return self.healthy

    async def _probe_one(self, replica: int) -> str:
        return await probe_health(self._transport, self.health.urls[replica],
                                  self.config.health_timeout_s)

    def _replica_of(self, url: object) -> int | None:
        """The replica a request URL goes to."""
        return next((i for i, u in enumerate(self.health.urls) if str(url).startswith(u + "/")),
                    None)

    async def _answers(self, url: object) -> bool:
        """A suspect replica (the stall watch's: a request URL) answers ``GET /health``."""
        i = self._replica_of(url)
        return i is not None and not await self._probe_one(i)

    async def _follow_addresses(self) -> None:
        """While a step runs: a replica that moved is followed to its new address."""
        while True:
            await asyncio.sleep(self.config.probe_interval_s)
            self.refresh_addresses()

    async def aclose(self) -> None:
        await self.health.aclose()
        await self._transport.aclose()

    def piece_runner(self) -> HttpPieceRunner:
        """The engine client every request goes through (whole responses and continuation
        pieces): the session gateway's ``HttpPieceRunner`` over this executor's transport,
        under its config (timeouts, retries, streaming), addressed by executor replica."""
        cfg = self.config
        if self.runner is None or self._runner_config is not cfg:
            self.runner = HttpPieceRunner(
                self.health.urls, cfg.backend, cfg.model, transport=self._transport,
                request_timeout_s=cfg.request_timeout_s, max_retries=cfg.max_retries,
                backoff_s=cfg.backoff_s, backoff_max_s=cfg.backoff_max_s,
                health_timeout_s=cfg.health_timeout_s,
                stream=cfg.stream and cfg.backend is not Backend.SGLANG,  # (SGLang: a sink)
                stream_interval=cfg.stream_interval,
                return_token_ids=cfg.return_token_ids or cfg.continuation)
            self._runner_config = cfg
        return self.runner

    async def resolve_model(self) -> str:
        """The served model name requests carry: ``config.model``, or when it is None the one
        model the healthy replicas serve (``HttpPieceRunner.resolve_model``; several =
        ``ConfigError``). Resolved once; the config is updated with it."""
        if self.config.model is not None:
            return self.config.model
        h = self.health
        name = await self.piece_runner().resolve_model(
            [i for i, ok in enumerate(h.healthy) if ok] or range(len(h.urls)))
        self.config = replace(self.config, model=name)
        return name

    async def chat_as_tokens(self, prompts: Mapping[str, PromptInput]) -> dict[str, PromptInput]:
        """``prompts`` with every chat prompt replaced by the token ids a healthy replica's
        ``/tokenize`` gives its messages under the model's chat template, with the generation
        prompt (``HttpPieceRunner.tokenize_chat``), so that a chat rollout can move its
        responses: a move continues a response as a token-id prompt, which vLLM's chat API
        does not take, while the chat endpoint only applies the template and then generates as
        the completions endpoint does. What is sampled is the same; the responses come back in
        the completions form."""
        if all(p.messages is None for p in prompts.values()):
            return dict(prompts)
        if not any(self.healthy):
            await self.probe()
        if not self.healthy_indices:
            raise StepFailedError("no healthy replica to tokenize the chat prompts")
        await self.resolve_model()
        runner, replica = self.piece_runner(), self.healthy_indices[0]

        async def one(p: PromptInput) -> PromptInput:
            if p.messages is None:
                return p
            try:
                ids = await runner.tokenize_chat(p.messages, replica)
            except ReplicaError as exc:
                raise ReplicaError(f"{runner.endpoints[replica]}: cannot tokenize chat prompt "
                                   f"{p.prompt_id!r} ({exc}); moves need the chat template "
                                   "applied by the server") from None
            return replace(p, messages=None, token_ids=ids)

        out = await asyncio.gather(*(one(p) for p in prompts.values()))
        return {p.prompt_id: p for p in out}

    async def check_priority(self, replicas: Sequence[int]) -> None:
        """Drain priority on: each of ``replicas`` must take a request priority, asked once
        (one request of one token per replica, within ``PRIORITY_CHECK_S``), so that a server
        without ``--scheduling-policy priority`` is named before the first step rather than
        failing one (``ConfigError``). A replica that faults or does not answer in time is
        left to the health model (it is not checked when it comes back)."""
        runner = self.piece_runner()

        async def refuses(replica: int) -> str:
            try:
                return await asyncio.wait_for(runner.refuses_priority(replica), PRIORITY_CHECK_S)
            except (ReplicaDownError, TimeoutError):
                return ""  # the health model's to judge

        refused = [w for w in await gather_all(*map(refuses, replicas)) if w]
        if refused:
            raise ConfigError(
                "drain priority (--drain-priority) needs every vLLM server started with "
                "--scheduling-policy priority (or run without --drain-priority); refused by "
                + "; ".join(refused))
