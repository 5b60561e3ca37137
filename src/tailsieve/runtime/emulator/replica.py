"""The emulated replica under its HTTP handlers: what every dialect's handlers share.

``EmulatedReplica`` holds the ``EngineDriver``, the prefix cache and the metrics, and keeps the
sequences' books: their drawn lengths (``_lengths``), submitting them (a token-id prompt pays
prefill only for its uncached tokens), aborting them, caching what they leave, and the injected
faults and error answers. ``emulator.sglang_endpoints`` (SGLang's ``/generate``) and
``emulator.server`` (``EmulatorServer``: the lifecycle and the OpenAI endpoints) build on it;
``request_json`` and ``sse_event`` read request bodies and frame ``data:`` events for both.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from statistics import NormalDist
from typing import Any

import numpy as np
from aiohttp import web

from tailsieve.model.replica_engine import Completion
from tailsieve.runtime.emulator import protocol as P
from tailsieve.runtime.emulator import responses as R
from tailsieve.runtime.emulator.config import EmulatorConfig
from tailsieve.runtime.emulator.driver import EngineDriver
from tailsieve.runtime.emulator.metrics import EmulatorMetrics
from tailsieve.runtime.emulator.prefix_cache import PrefixCache

MIN_POLL_S = 0.001  # shortest wait between streamed chunk writes, real seconds


class EmulatedReplica:
    """One replica's engine, prefix cache and metrics, and its sequences' bookkeeping."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.driver = EngineDriver(config.replica_config(), config.time_scale, self._on_complete,
                                   config.scheduling_policy == "priority")
        self.prefix_cache = _prefix_cache(config)
        if config.kv_capacity_tokens is not None:
            self.driver.on_sync = self._fit_cache
        self.metrics = EmulatorMetrics(self.driver, config.model_name, self.prefix_cache)
        self._rng = np.random.default_rng([config.seed, 0])  # injected errors + lengths
        self._meta: dict[str, tuple[str, float]] = {}  # seq id -> (finish reason, submitted)
        self._seq_prompt: dict[str, tuple[int, ...]] = {}  # seq id -> prompt ids (to cache)
        self._seq_cached: dict[str, int] = {}  # seq id -> its prompt tokens found cached

    def _on_complete(self, c: Completion) -> None:
        reason, t0 = self._meta.pop(str(c.request_id), ("length", 0.0))
        self.metrics.finished(reason, c.num_tokens, time.monotonic() - t0)
        self._cache(str(c.request_id), c.num_tokens)

    def _abort(self, seq_id: str) -> None:
        tokens = self.driver.abort(seq_id)  # may complete it first (then _on_complete ran)
        self._meta.pop(seq_id, None)
        self._cache(seq_id, tokens)  # counted in generation_tokens_total; no request_success

    def _cache(self, seq_id: str, num_generated: int) -> None:
        """The prompt and the generated tokens of a finished or aborted sequence stay in this
        replica's prefix cache (a response continued here finds its prefix)."""
        ids = self._seq_prompt.pop(seq_id, None)
        if ids is not None:
            self.prefix_cache.insert(ids + (R.FILLER_TOKEN_ID,) * num_generated)

    def _fit_cache(self) -> None:
        """The prefix cache holds what the running requests leave of the KV budget (as the
        simulator's ``fit_cache``)."""
        kv = self.config.kv_capacity_tokens
        assert kv is not None
        free = kv - self.driver.engine.kv_tokens()
        self.prefix_cache.fit(int(free) // self.prefix_cache.block_tokens)

    def _submit(self, sid: str, k: int, prompt_ids: tuple[int, ...],
                priority: int = 0) -> asyncio.Future[Completion]:
        """Start a sequence; a token-id prompt pays prefill only for its uncached tokens. One
        that carries generated (filler) tokens, a continued response or a later turn of a
        multi-turn trajectory (earlier turns' outputs, then new tokens), prefills them at
        the profile's prefill model (``EmulatorConfig``)."""
        if all(t == P.PROMPT_TOKEN_ID for t in prompt_ids):  # a text prompt: no cache
            return self.driver.submit(sid, k, len(prompt_ids), priority=priority)
        self._seq_prompt[sid] = prompt_ids
        cached = self._seq_cached[sid] = self.prefix_cache.lookup(prompt_ids)
        cont = R.FILLER_TOKEN_ID in prompt_ids
        return self.driver.submit(sid, k, len(prompt_ids), cached_tokens=cached, continuation=cont,
                                  priority=priority)

    def _lengths(self, req: P.GenRequest) -> list[tuple[int, str]]:
        """(tokens, finish_reason) of every sequence, prompt-major then choice."""
        out: list[tuple[int, str]] = []
        cfg = self.config
        for p, prompt_len in enumerate(req.prompt_tokens):
            cap = min(req.max_tokens, cfg.max_model_len - prompt_len)  # vLLM clips silently
            rng = self._rng if req.seed is None else np.random.default_rng([req.seed, p])
            done = _generated_suffix(req.prompt_ids[p]) if req.prompt_ids else 0
            for _ in range(req.n):
                if req.ignore_eos:
                    out.append((cap, "length"))
                    continue
                draw = rng.lognormal(np.log(cfg.length_median_tokens), cfg.length_sigma)
                if done and round(float(draw)) <= done:  # drawn given it reached ``done``
                    draw = _conditional_draw(
                        float(rng.random()), done, cfg.length_median_tokens, cfg.length_sigma
                    )
                k = int(min(max(round(float(draw)) - done, req.min_tokens, 1), cap))
                out.append((k, "length" if k == cap else "stop"))
        return out

    @staticmethod
    def _error(message: str, err_type: str, status: int, param: str | None = None) -> web.Response:
        return web.json_response(P.error_body(message, err_type, status, param), status=status)

    def _fault(self) -> web.Response | None:
        """An injected 500 (``error_rate``), or None."""
        if self.config.error_rate > 0 and self._rng.random() < self.config.error_rate:
            return self._error(f"injected fault (error_rate={self.config.error_rate:g})",
                               "InternalServerError", 500)
        return None

    def _start_all(self, req: P.GenRequest, rid: str, lengths: list[tuple[int, str]]
                   ) -> tuple[list[str], list[asyncio.Future[Completion]], list[int]]:
        """Submit every sequence of ``req``: their ids, futures and prompt tokens found cached."""
        seq_ids = [f"{rid}-{i}" for i in range(len(lengths))]
        futs: list[asyncio.Future[Completion]] = []
        now = time.monotonic()
        for i, (sid, (k, reason)) in enumerate(zip(seq_ids, lengths, strict=True)):
            self._meta[sid] = (reason, now)
            futs.append(self._submit(sid, k, req.prompt_ids[i // req.n], req.priority))
        return seq_ids, futs, [self._seq_cached.pop(sid, 0) for sid in seq_ids]

    def _abort_unfinished(self, seq_ids: list[str], futs: list[asyncio.Future[Completion]]) -> None:
        for sid, fut in zip(seq_ids, futs, strict=True):
            if not fut.done() or fut.cancelled():  # gather() cancels them on disconnect
                self._abort(sid)


async def request_json(request: web.Request) -> Any:
    """The request's JSON body; ``P.BadRequest`` when it is not JSON."""
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise P.BadRequest("request body is not valid JSON") from None


def sse_event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _prefix_cache(config: EmulatorConfig) -> PrefixCache:
    """A replica's prefix cache: as many blocks as its KV budget holds (vLLM keeps cached
    blocks in the KV cache until it needs them; ``EmulatedReplica._fit_cache`` then shrinks it
    to what the running requests leave), unbounded without a budget."""
    kv = config.kv_capacity_tokens
    if kv is None:
        return PrefixCache()
    return PrefixCache(max_blocks=max(1, kv // PrefixCache().block_tokens))


def _generated_suffix(ids: tuple[int, ...]) -> int:
    """Trailing generated (filler) tokens of a prompt: a continuation's tokens so far."""
    n = 0
    for t in reversed(ids):
        if t != R.FILLER_TOKEN_ID:
            break
        n += 1
    return n


def _conditional_draw(u: float, done: int, median: float, sigma: float) -> float:
    """A lognormal length drawn given that it exceeds ``done`` tokens (inverse CDF on the tail),
    for a continuation whose own draw ended before the tokens it already has."""
    nd = NormalDist(math.log(median), sigma)
    lo = nd.cdf(math.log(done + 0.5))
    q = min(lo + u * (1.0 - lo), 1.0 - 1e-12)
    return max(math.exp(nd.inv_cdf(q)), done + 1.0)
