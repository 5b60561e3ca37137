"""The live side of the ``auto`` profile: time every generation request, probe at start.

``ObservingTransport`` wraps the router's ``Transport``: every POST to a generation path
(``/v1/completions``, ``/v1/chat/completions``, SGLang's ``/generate``) is recorded in an
``OnlineProfile`` (``model.online_profile``) with its replica, its send and answer times on the
event loop's clock, its prompt tokens and the tokens each sequence generated (from the answer:
token ids, logprob entries or ``usage``; streamed: the chunks, and the first token's arrival as
a time to first token of the prompt tokens the server says it did not find in its prefix cache
(SGLang's ``cached_tokens``; vLLM's ``prompt_tokens_details`` when the server reports them):
a prefill whose cache hits are unknown says nothing about the prefill rate). Cancelled and failed requests are recorded as such: they still ran on
their replica. Nothing else changes: the payload and the answer pass through untouched, and
cancelling the awaiting task still closes the connection.

``probe`` is the short lockstep measurement used when no fallback profile is named: rounds of
``b`` concurrent requests of exactly ``tokens`` and ``tokens / 4`` tokens on every replica at once
(as ``tailsieve profile`` does, through the same transport, so they are ordinary
observations), and a few one-token requests with short and long prompts for the prefill rate.

``AutoProfile`` ties them together for ``TailSieveRollout`` (and the HTTP proxy): ``wrap`` a
transport, ``probe`` once, ``current()`` between steps.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.model.decode_observations import PrefillObservation
from tailsieve.model.online_fit import FitSettings
from tailsieve.model.online_profile import OnlineProfile
from tailsieve.model.profiles import load_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.backends import Backend, PromptInput, SamplingParams, build_request
from tailsieve.runtime.transport import JSON, Transport

GENERATION_PATHS = tuple(b.path for b in Backend)
CHARS_PER_TOKEN = 4  # prompt tokens of a text prompt until the server's count comes back


class ObservingTransport:
    """A ``Transport`` that records every generation request in ``profile``."""

    def __init__(self, inner: Transport, profile: OnlineProfile) -> None:
        self.inner = inner
        self.profile = profile

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        replica = _replica_of(url)
        if replica is None:
            return await self.inner.post_json(url, payload, timeout_s)
        loop = asyncio.get_running_loop()
        sent = loop.time()
        rid = self.profile.request_started(replica, sent, _prompt_tokens(payload),
                                           _num_seqs(payload), _max_tokens(payload))
        done = False
        try:
            out = await self.inner.post_json(url, payload, timeout_s)
            done = True
        finally:
            if not done:
                self.profile.request_ended(rid, loop.time(), None, False)
        tokens, prompt = answer_tokens(out)
        self.profile.request_ended(rid, loop.time(), tokens, tokens is not None, prompt)
        return out

    async def stream_json(self, url: str, payload: JSON, timeout_s: float | None,
                          ) -> AsyncIterator[JSON]:
        replica = _replica_of(url)
        if replica is None:
            async for chunk in self.inner.stream_json(url, payload, timeout_s):
                yield chunk
            return
        loop = asyncio.get_running_loop()
        sent = loop.time()
        rid = self.profile.request_started(replica, sent, _prompt_tokens(payload),
                                           _num_seqs(payload), _max_tokens(payload))
        count = _StreamCount(_num_seqs(payload))
        first: float | None = None
        finished = False
        try:
            async for chunk in self.inner.stream_json(url, payload, timeout_s):
                if count.add(chunk) and first is None:
                    first = loop.time()
                yield chunk
            finished = True
        finally:
            self.profile.request_ended(rid, loop.time(), count.tokens(), finished,
                                       count.prompt_tokens, first, sent, count.uncached())

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        return await self.inner.get(url, timeout_s)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _replica_of(url: str) -> str | None:
    for path in GENERATION_PATHS:
        if url.endswith(path):
            return url[: -len(path)]
    return None


def _prompt_tokens(payload: JSON) -> int:
    for key in ("prompt", "input_ids", "text"):
        p = payload.get(key)
        if isinstance(p, (list, tuple)):
            return len(p)
        if isinstance(p, str):
            return len(p) // CHARS_PER_TOKEN + 1
    msgs = payload.get("messages")
    if isinstance(msgs, list):
        return sum(len(str(m.get("content", ""))) for m in msgs if isinstance(m, dict)) // (
            CHARS_PER_TOKEN) + 1
    return 0


def _num_seqs(payload: JSON) -> int:
    n = payload.get("n", (payload.get("sampling_params") or {}).get("n", 1))
    return n if isinstance(n, int) and n >= 1 else 1


def _max_tokens(payload: JSON) -> int | None:
    m = payload.get("max_tokens", (payload.get("sampling_params") or {}).get("max_new_tokens"))
    return m if isinstance(m, int) else None


def answer_tokens(body: Any) -> tuple[tuple[int, ...] | None, int | None]:
    """Tokens each sequence of a non-streamed answer generated, and the prompt tokens the
    server counted (None where the answer does not say)."""
    if isinstance(body, list):  # SGLang, n > 1
        parts = [answer_tokens(b) for b in body]
        if not parts or any(t is None for t, _ in parts):
            return None, None
        return tuple(x for t, _ in parts for x in (t or ())), parts[0][1]
    if not isinstance(body, dict):
        return None, None
    meta = body.get("meta_info")
    if isinstance(meta, dict):  # SGLang
        c, p = meta.get("completion_tokens"), meta.get("prompt_tokens")
        return ((int(c),) if isinstance(c, int) else None), (p if isinstance(p, int) else None)
    usage = body.get("usage") or {}
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    prompt = prompt if isinstance(prompt, int) else None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return None, prompt
    counts = [_choice_tokens(ch) for ch in choices]
    if all(c is not None for c in counts):
        return tuple(int(c) for c in counts if c is not None), prompt
    total = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(total, int):
        return None, prompt
    per = total / len(choices)
    return tuple(round(per) for _ in choices), prompt


def _choice_tokens(ch: Any) -> int | None:
    if not isinstance(ch, dict):
        return None
    ids = ch.get("token_ids")
    if ids is not None:
        return len(ids)
    lp = ch.get("logprobs")
    if isinstance(lp, dict):
        toks = lp.get("tokens") or lp.get("content")
        if isinstance(toks, list):
            return len(toks)
    return None


class _StreamCount:
    """Tokens per sequence of a streamed answer as its chunks arrive."""

    def __init__(self, n: int) -> None:
        self.counts = [0] * n
        self.usage: int | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None  # prefix-cache hits, where the server says

    def add(self, chunk: JSON) -> bool:
        """Count ``chunk``; True when it carried generated tokens."""
        got = False
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                self.usage = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                self.prompt_tokens = usage["prompt_tokens"]
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                self.cached_tokens = details["cached_tokens"]
        meta = chunk.get("meta_info")
        if isinstance(meta, dict):  # SGLang: cumulative counts
            c = meta.get("completion_tokens")
            if isinstance(c, int) and c > self.counts[0]:
                self.counts[0], got = c, True
            if isinstance(meta.get("prompt_tokens"), int):
                self.prompt_tokens = meta["prompt_tokens"]
            if isinstance(meta.get("cached_tokens"), int):
                self.cached_tokens = meta["cached_tokens"]
        for ch in chunk.get("choices") or ():
            i = ch.get("index", 0) if isinstance(ch, dict) else 0
            if not isinstance(i, int) or not 0 <= i < len(self.counts):
                continue
            n = _choice_tokens(ch)
            if n is None:
                text = ch.get("text")
                if text is None:
                    text = (ch.get("delta") or {}).get("content")
                n = 1 if text else 0
            self.counts[i] += n
            got = got or n > 0
        return got

    def uncached(self) -> int | None:
        """Prompt tokens the server prefilled (None unless it reported its cache hits)."""
        if self.prompt_tokens is None or self.cached_tokens is None:
            return None
        return max(self.prompt_tokens - self.cached_tokens, 0)

    def tokens(self) -> tuple[int, ...] | None:
        if len(self.counts) == 1 and self.usage is not None:
            return (self.usage,)
        return tuple(self.counts) if any(self.counts) else None


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """The short probe of ``profile='auto'`` (no fallback named)."""

    tokens: int = 48  # tokens per request of the full rounds (the short ones: a quarter)
    max_batch: int = 64  # largest batch probed (the expected load per replica, capped here)
    prefill_words: tuple[int, ...] = (16, 192)  # prompt lengths of the one-token requests
    prefill_repeats: int = 3  # one-token requests per prompt length and replica
    timeout_s: float = 120.0  # limit per request, seconds

    def __post_init__(self) -> None:
        if self.tokens < 8 or self.max_batch < 1 or self.prefill_repeats < 0:
            raise ConfigError("probe: need tokens >= 8, max_batch >= 1, prefill_repeats >= 0")

    def batch_sizes(self, load: int) -> tuple[int, ...]:
        """1, the expected load per replica (capped) and their geometric mean."""
        top = max(2, min(load, self.max_batch))
        mid = round(math.sqrt(top))
        return tuple(sorted({1, mid, top}))


class AutoProfile:
    """``profile='auto'`` in a live rollout: an ``OnlineProfile`` fed by ``wrap``'s transport,
    with a named fallback (``auto:NAME``) or, without one, a short ``probe``."""

    def __init__(self, fallback: str | None = None, settings: FitSettings | None = None,
                 probe: ProbeSettings | None = None) -> None:
        self.fallback_name = fallback
        model = load_profile(fallback) if fallback is not None else None
        self.online = OnlineProfile(model, settings)
        self.probe_settings = probe or ProbeSettings()
        self.probed = False

    @property
    def needs_probe(self) -> bool:
        return self.fallback_name is None and not self.probed

    def wrap(self, transport: Transport) -> ObservingTransport:
        return ObservingTransport(transport, self.online)

    def current(self) -> ThroughputModel:
        return self.online.current()

    async def probe(self, transport: Transport, urls: Sequence[str], backend: Backend,
                    model: str, load: int) -> None:
        """Lockstep rounds on every replica (``ProbeSettings``); ``transport`` must be the
        one ``wrap`` returned, so the decode rounds become observations. A replica that fails
        is left out; all failing is a ``ReplicaError``."""
        st = self.probe_settings
        alive = list(urls)
        for b in st.batch_sizes(load):
            for tokens in (max(2, st.tokens // 4), st.tokens):
                alive = await _lockstep(transport, alive, backend, model, b, tokens, st)
                if not alive:
                    raise ReplicaError(f"auto profile: the probe failed on every replica "
                                       f"({', '.join(urls)}); name a fallback (auto:NAME)")
        rng = np.random.default_rng(0)
        for _ in range(st.prefill_repeats):
            for words in st.prefill_words:
                texts = [_distinct_text(rng, words) for _ in alive]
                got = await asyncio.gather(
                    *(_timed(transport, u, backend, model, t, 1, st.timeout_s)
                      for u, t in zip(alive, texts, strict=True)), return_exceptions=True)
                self.online.add_prefill(
                    PrefillObservation(p, s) for g in got if not isinstance(g, BaseException)
                    for s, p in [g] if p)
        self.probed = True


async def _lockstep(transport: Transport, urls: list[str], backend: Backend, model: str, b: int,
                    tokens: int, st: ProbeSettings) -> list[str]:
    """``b`` requests of exactly ``tokens`` on every replica at once; the replicas that
    answered them all."""
    async def one(url: str) -> None:
        await asyncio.gather(*(_timed(transport, url, backend, model, "hello", tokens,
                                      st.timeout_s) for _ in range(b)))

    got = await asyncio.gather(*(one(u) for u in urls), return_exceptions=True)
    return [u for u, g in zip(urls, got, strict=True) if not isinstance(g, BaseException)]


async def _timed(transport: Transport, url: str, backend: Backend, model: str, text: str,
                 tokens: int, timeout_s: float) -> tuple[float, int]:
    """One request for exactly ``tokens`` tokens: its seconds and the prompt tokens counted."""
    body = build_request(backend, model, PromptInput("probe", text=text),
                         SamplingParams(max_tokens=tokens), 1, forced_tokens=tokens)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out = await transport.post_json(url.rstrip("/") + backend.path, body, timeout_s)
    _, prompt = answer_tokens(out)
    return loop.time() - t0, prompt or 0


WORDS = ("time", "river", "stone", "light", "paper", "green", "seven", "market", "winter",
         "garden", "number", "yellow", "signal", "forest", "silver", "engine")


def _distinct_text(rng: np.random.Generator, words: int) -> str:
    """A prompt of ``words`` random words (no two alike: no prefix-cache hit)."""
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), words))
