"""The live side of the ``auto`` profile: time every generation request, probe at start.

``ObservingTransport`` wraps the router's ``Transport``: every POST to a generation path
(``/v1/completions``, ``/v1/chat/completions``, SGLang's ``/generate``) is recorded in an
``OnlineProfile`` (``model.online_profile``) with its replica, its send and answer times on the
event loop's clock, its prompt tokens and the tokens each sequence generated
(``runtime.answer_counts``). A streamed request's first token is also a time to first token of
the prompt tokens the server says it did not find in its prefix cache (SGLang's
``cached_tokens``; vLLM's ``prompt_tokens_details`` when it reports them): a prefill whose cache
hits are unknown says nothing about the prefill rate. Cancelled and failed requests are
recorded as such: they still ran on their replica. Nothing else changes: the payload and the
answer pass through untouched, and cancelling the awaiting task still closes the connection.

``AutoProfile`` ties it together for ``TailSieveRollout`` (and an HTTP proxy): ``wrap`` a
transport, ``probe`` once when no fallback profile is named (``runtime.auto_probe``: the
model used until the fit is trusted), ``current()`` between steps::

    auto = AutoProfile(fallback=None)             # "auto"; AutoProfile("cpu") is "auto:cpu"
    transport = auto.wrap(LeanTransport())        # send every request through it
    await auto.probe(transport, urls, Backend.VLLM, model_name, load=64)
    ...
    model = auto.current()                        # a ThroughputModel; refits when there is news

``current()`` refits on what arrived since the last call (up to ~1 s at 2,000 requests in
flight on a loaded 2-core machine): call it between steps, or off the hot path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tailsieve.model.online_fit import FitSettings
from tailsieve.model.online_profile import OnlineProfile
from tailsieve.model.profiles import load_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.answer_counts import StreamCount, answer_tokens
from tailsieve.runtime.auto_probe import ProbeSettings, probe_replicas
from tailsieve.runtime.backends import Backend
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
        count = StreamCount(_num_seqs(payload))
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
                    model: str, load: int) -> ThroughputModel:
        """Measure the replicas with the short lockstep probe (``runtime.auto_probe``) and use
        the result until the fit is trusted. The probe's requests are not observations (they
        go around ``wrap``'s recording): a round of requests sent at once reaches the server
        over a spread of time the router cannot see, which biases a fit, while the
        difference of two rounds' median end times cancels it."""
        inner = transport.inner if isinstance(transport, ObservingTransport) else transport
        measured = await probe_replicas(inner, urls, backend, model, load, self.probe_settings)
        self.online.fallback = measured
        self.probed = True
        return measured
