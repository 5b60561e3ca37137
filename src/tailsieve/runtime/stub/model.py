"""The stub's model mode: replicas that generate by a deterministic greedy model.

``StubModel`` makes the next token a hash of the whole prefix, as a greedy model's would be, so
a response in pieces on any replicas equals the one-go ``generate``. ``ModelReplicas`` runs
token-id prompts on replicas with a prefix cache (reported cached tokens), each at its own
``seconds_per_token``; ``kill`` / ``revive`` a replica; streams closed early count in
``num_interrupts``; requests are logged in ``calls``. ``StubPieceRunner`` is the engine client
(``HttpPieceRunner``, its wire code run) over such replicas: the one fake for tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.emulator.prefix_cache import PrefixCache
from tailsieve.runtime.engine.transport import JSON, ReplicaDownError

_MOD = (1 << 61) - 1
_MUL = 1_000_003
VOCAB_BASE = 1_000  # the model's generated ids are VOCAB_BASE .. VOCAB_BASE + VOCAB - 1
VOCAB = 50_000


@dataclass(frozen=True, slots=True)
class StubModel:
    """The deterministic next-token rule of a ``model`` stub."""

    eos_every: int = 97  # a generated id divisible by this ends the response (mean length)

    def __post_init__(self) -> None:
        if self.eos_every < 2:
            raise ConfigError(f"eos_every must be >= 2, got {self.eos_every}")

    def generate(self, prompt_ids: Sequence[int], max_tokens: int) -> tuple[list[int], str]:
        """The tokens generated after ``prompt_ids`` (at most ``max_tokens``) and the finish
        reason, as one request would produce them."""
        h = 0
        for t in prompt_ids:
            h = (h * _MUL + t) % _MOD
        out: list[int] = []
        while len(out) < max_tokens:
            tok = VOCAB_BASE + (h >> 11) % VOCAB
            out.append(tok)
            h = (h * _MUL + tok) % _MOD
            if tok % self.eos_every == 0:
                return out, "stop"
        return out, "length"


@dataclass(frozen=True, slots=True)
class StubCall:
    """One ``model`` request as a replica received it."""

    replica: int
    prompt_ids: tuple[int, ...]
    max_tokens: int
    output_ids: tuple[int, ...] = ()  # what it returned (failed: what it streamed)
    failed: bool = False


@dataclass(slots=True)
class _Replica:
    index: int
    seconds_per_token: float
    cache: PrefixCache = field(default_factory=PrefixCache)
    running: set[asyncio.Future[None]] = field(default_factory=set)
    dead: bool = False


class ModelReplicas:
    """Replicas (by base URL, each its ``seconds_per_token`` in ``speeds``) that generate by
    ``model``, each request slowed by ``batch_slowdown`` per other request running there."""

    def __init__(self, model: StubModel, speeds: dict[str, float],
                 batch_slowdown: float) -> None:
        self.model = model
        self.batch_slowdown = batch_slowdown
        self.replicas = {url: _Replica(i, spt) for i, (url, spt) in enumerate(speeds.items())}
        self.calls: list[StubCall] = []
        self.num_interrupts = 0  # streams closed before their last token

    def kill(self, replica: int) -> None:
        """Replica ``replica`` dies: its running requests fail, new ones are refused."""
        rep = list(self.replicas.values())[replica]
        rep.dead, rep.cache = True, PrefixCache()
        for fut in list(rep.running):
            if not fut.done():
                fut.set_exception(ReplicaDownError(f"stub replica {replica} died"))

    def revive(self, replica: int) -> None:
        list(self.replicas.values())[replica].dead = False

    def _start(self, url: str, base: str,
               payload: JSON) -> tuple[_Replica, StubCall, list[int], str]:
        """A request's replica, its call and what it generates."""
        rep = self.replicas[base]
        raw = payload["prompt"]
        prompt = tuple(ord(c) for c in raw) if isinstance(raw, str) else tuple(raw)
        call = StubCall(rep.index, prompt, int(payload["max_tokens"]))
        if rep.dead:
            self.calls.append(replace(call, failed=True))
            raise ReplicaDownError(f"{url}: connection refused")
        ids, reason = self.model.generate(call.prompt_ids, call.max_tokens)
        return rep, call, ids, reason

    async def _run(self, rep: _Replica, num_tokens: int) -> None:
        """Generate ``num_tokens`` on ``rep`` (a ``ReplicaDownError`` when it is killed)."""
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        rep.running.add(gate)
        slow = 1.0 + self.batch_slowdown * (len(rep.running) - 1)
        timer = loop.call_later(num_tokens * rep.seconds_per_token * slow, _release, gate)
        try:
            await gate
        finally:
            timer.cancel()
            rep.running.discard(gate)

    def _choice(self, ids: Sequence[int], **extra: Any) -> JSON:
        offs = list(accumulate((len(f"<{t}>") for t in ids), initial=0))[:-1]
        return {"index": 0, "text": "".join(f"<{t}>" for t in ids), "token_ids": list(ids),
                "logprobs": {"token_logprobs": [-((t % 7) + 1) / 10 for t in ids],
                             "text_offset": offs}, **extra}

    def _usage(self, rep: _Replica, call: StubCall, cached: int, num: int) -> JSON:
        rep.cache.insert(call.prompt_ids + call.output_ids)
        self.calls.append(call)
        return {"prompt_tokens": len(call.prompt_ids), "completion_tokens": num,
                "prompt_tokens_details": {"cached_tokens": cached}}

    async def post(self, url: str, base: str, payload: JSON) -> JSON:
        """A whole completion, as vLLM answers it."""
        rep, call, ids, reason = self._start(url, base, payload)
        cached = rep.cache.lookup(call.prompt_ids)
        try:
            await self._run(rep, len(ids))
        except ReplicaDownError:
            self.calls.append(replace(call, failed=True))
            raise
        usage = self._usage(rep, replace(call, output_ids=tuple(ids)), cached, len(ids))
        echo = ({"prompt_token_ids": list(call.prompt_ids)}
                if isinstance(payload["prompt"], str) else {})  # a text prompt's ids, as vLLM's
        return {"choices": [self._choice(ids, finish_reason=reason, **echo)], "usage": usage}

    async def stream(self, url: str, base: str, payload: JSON) -> AsyncIterator[JSON]:
        """A streamed completion, one token a chunk, as vLLM streams it."""
        rep, call, ids, reason = self._start(url, base, payload)
        cached = rep.cache.lookup(call.prompt_ids)
        sent: list[int] = []
        try:
            for t in ids:
                await self._run(rep, 1)
                sent.append(t)
                yield {"choices": [self._choice([t])]}
        except ReplicaDownError:  # what it streamed came (the engine client keeps it)
            self.calls.append(replace(call, output_ids=tuple(sent), failed=True))
            raise
        except (asyncio.CancelledError, GeneratorExit):
            self.num_interrupts += 1
            self._usage(rep, replace(call, output_ids=tuple(sent)), cached, len(sent))
            raise
        usage = self._usage(rep, replace(call, output_ids=tuple(ids)), cached, len(ids))
        yield {"choices": [{"index": 0, "text": "", "token_ids": [], "finish_reason": reason}]}
        yield {"choices": [], "usage": usage}


def _release(gate: asyncio.Future[None]) -> None:
    if not gate.done():
        gate.set_result(None)
