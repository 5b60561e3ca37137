"""The stub's ``Transport``: in-memory replicas that answer as vLLM completion servers do.

Each request of ``L`` tokens takes ``L * seconds_per_token`` (scaled by the number of requests
running on that replica when ``batch_slowdown`` > 0). Lengths come from ``length_of(prompt,
sample)`` unless the request forces them (``ignore_eos`` + ``max_tokens``). A prompt given as token
ids is a continuation: the prompt's ids then the tokens generated so far (checked to be exactly
what that sample generated). Faults per replica URL are scripted with ``StubFault``; every
request start, completion and cancellation is recorded. With a ``model`` the requests go to
``stub.model.ModelReplicas`` instead (the model mode). ``GET`` answers the served models and the
health probe.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from tailsieve.runtime.engine.transport import JSON, ReplicaDownError, RequestError
from tailsieve.runtime.stub.model import ModelReplicas, StubModel


@dataclass(slots=True)
class StubFault:
    """Scripted misbehaviour of one replica (base URL)."""

    refuse: bool = False  # every connection refused
    die_after_s: float | None = None  # requests in flight (and later ones) fail from then on
    hang: bool = False  # requests never answer (only the request timeout ends them)
    num_http_500: int = 0  # the next k requests answer HTTP 500
    num_malformed: int = 0  # the next k requests answer a body that is not JSON
    num_http_400: int = 0  # the next k requests answer HTTP 400 (not retryable)


@dataclass(slots=True)
class StubLog:
    """What happened, for assertions."""

    started: list[tuple[str, str, int]] = field(default_factory=list)  # (url, prompt, seed|-1)
    completed: list[tuple[str, str]] = field(default_factory=list)
    cancelled: list[tuple[str, str]] = field(default_factory=list)
    health_checks: list[str] = field(default_factory=list)
    continued: list[tuple[str, str, int, int]] = field(default_factory=list)  # url, prompt, s, done
    broken_chains: list[tuple[str, str, int]] = field(default_factory=list)  # not token-exact


PROMPT_BASE = 10_000_000  # prompt token ids: PROMPT_BASE + ord(char) of the prompt text


def token_at(sample: int, position: int) -> int:
    """The token id sample ``sample`` generates at ``position`` (distinct per sample below
    2**40; larger samples, e.g. 62-bit seeds, fold onto that range so ids fit in int64)."""
    return (sample % 2**40) * 100_000 + position


def prompt_ids(text: str) -> list[int]:
    """The stub's tokenization of a text prompt."""
    return [PROMPT_BASE + ord(c) for c in text]


class StubTransport:
    """Fake replicas behind ``Transport``; prompts are text ``"<prompt_id>"``."""

    def __init__(
        self,
        length_of: Callable[[str, int], int],
        seconds_per_token: float = 0.001,
        batch_slowdown: float = 0.0,
        faults: dict[str, StubFault] | None = None,
        model: StubModel | None = None,
        replica_speeds: dict[str, float] | None = None,
    ) -> None:
        self.length_of = length_of
        self.seconds_per_token = seconds_per_token
        self.batch_slowdown = batch_slowdown
        self.faults: dict[str, StubFault] = faults or {}
        self.log = StubLog()
        self.served_models: tuple[str, ...] = ("stub",)  # listed at GET /v1/models
        self._running: dict[str, int] = {}
        self._t0: float | None = None
        self.model = model
        self._models = ModelReplicas(model or StubModel(), replica_speeds or {}, batch_slowdown)
        self.replicas, self.calls = self._models.replicas, self._models.calls  # ``model``'s
        self.kill, self.revive = self._models.kill, self._models.revive

    @property
    def num_interrupts(self) -> int:
        """``model`` streams closed before their last token."""
        return self._models.num_interrupts

    def _base(self, url: str) -> str:
        return url.split("/v1/")[0].split("/generate")[0].split("/health")[0]

    def _clock(self) -> float:
        now = asyncio.get_running_loop().time()
        if self._t0 is None:
            self._t0 = now
        return now - self._t0

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        if self.model is not None:
            return await self._models.post(url, self._base(url), payload)
        base = self._base(url)
        f = self.faults.get(base, StubFault())
        if f.refuse or (f.die_after_s is not None and self._clock() >= f.die_after_s):
            raise ReplicaDownError(f"{url}: connection refused")
        for attr, status in (("num_http_500", 500), ("num_http_400", 400)):
            if getattr(f, attr) > 0:
                setattr(f, attr, getattr(f, attr) - 1)
                raise RequestError(f"{url}: HTTP {status}", status=status, retryable=status >= 500)
        if f.num_malformed > 0:
            f.num_malformed -= 1
            raise RequestError(f"{url}: malformed JSON: 'garbage'")
        n = int(payload.get("n", 1))
        seed = int(payload.get("seed", -1))
        sample0 = max(seed, 0) if seed >= 0 else 0
        prompt, done = self._split_prompt(payload.get("prompt"), sample0, url)
        if payload.get("ignore_eos"):
            lengths = [int(payload["max_tokens"])] * n
        else:
            lengths = [
                max(0, min(self.length_of(prompt, sample0 + i) - done, int(payload["max_tokens"])))
                for i in range(n)
            ]
        ended = [
            not payload.get("ignore_eos")
            and done + k >= self.length_of(prompt, sample0 + i)
            for i, k in enumerate(lengths)
        ]
        self.log.started.append((base, prompt, seed))
        self._running[base] = self._running.get(base, 0) + 1
        try:
            dur = max(lengths) * self.seconds_per_token
            dur *= 1.0 + self.batch_slowdown * (self._running[base] - 1)
            if f.hang:
                dur = float("inf")
            deadline = dur if timeout_s is None else min(dur, timeout_s)
            if f.die_after_s is not None:
                left = f.die_after_s - self._clock()
                if left < deadline:
                    await asyncio.sleep(max(left, 0.0))
                    raise ReplicaDownError(f"{url}: server disconnected")
            await asyncio.sleep(deadline)
            if deadline < dur:
                raise ReplicaDownError(f"{url}: timed out after {timeout_s} s")
        except asyncio.CancelledError:
            self.log.cancelled.append((base, prompt))
            raise
        finally:
            self._running[base] -= 1
        self.log.completed.append((base, prompt))
        return {
            "choices": [
                {
                    "index": i,
                    "text": f"{prompt}:{sample0 + i}" if done == 0 else "",
                    "finish_reason": "stop" if ended[i] else "length",
                    "token_ids": [token_at(sample0 + i, done + j) for j in range(length)],
                    "prompt_token_ids": prompt_ids(prompt),
                }
                for i, length in enumerate(lengths)
            ],
            "usage": {"completion_tokens": sum(lengths)},
        }

    def _split_prompt(self, raw: Any, sample: int, url: str) -> tuple[str, int]:
        """(prompt text, tokens already generated) of a text prompt or a continuation (the
        prompt's ids plus the generated ids). A continuation whose generated part is not what
        this sample generated is logged in ``log.broken_chains``."""
        if not isinstance(raw, list | tuple):
            return str(raw), 0
        head = [t for t in raw if t >= PROMPT_BASE]
        tail = list(raw[len(head) :])
        text = "".join(chr(t - PROMPT_BASE) for t in head)
        if tail != [token_at(sample, j) for j in range(len(tail))]:
            self.log.broken_chains.append((url, text, sample))
        self.log.continued.append((self._base(url), text, sample, len(tail)))
        return text, len(tail)

    async def stream_json(
        self, url: str, payload: JSON, timeout_s: float | None
    ) -> AsyncIterator[JSON]:
        if self.model is not None:
            async for chunk in self._models.stream(url, self._base(url), payload):
                yield chunk
            return
        task = asyncio.ensure_future(self.post_json(url, payload, timeout_s))
        sent = 0
        if int(payload.get("n", 1)) == 1:  # tokens stream as they are generated
            s0 = max(int(payload.get("seed", -1)), 0)
            raw = payload.get("prompt")
            done = sum(1 for t in raw if t < PROMPT_BASE) if isinstance(raw, list | tuple) else 0
            loop = asyncio.get_running_loop()
            t0, cap = loop.time(), int(payload["max_tokens"])
            text = (
                "".join(chr(t - PROMPT_BASE) for t in raw if t >= PROMPT_BASE)
                if isinstance(raw, list | tuple)
                else str(raw)
            )
            if not payload.get("ignore_eos"):
                cap = min(cap, self.length_of(text, s0) - done)
            try:
                while not task.done():
                    await asyncio.wait({task}, timeout=self.seconds_per_token * 4)
                    k = min(int((loop.time() - t0) / self.seconds_per_token), cap)
                    if task.done() or k <= sent:
                        continue
                    toks = [token_at(s0, done + j) for j in range(sent, k)]
                    first = {"prompt_token_ids": prompt_ids(text)} if sent == 0 else {}
                    sent = k
                    yield {"choices": [{"index": 0, "text": "", "token_ids": toks, **first}]}
            finally:
                if not task.done():
                    task.cancel()
                    await asyncio.wait({task})  # raises only if this stream is cancelled
        body = await task
        for ch in body["choices"]:
            for j, tok in enumerate(ch["token_ids"][sent:]):
                first = {"prompt_token_ids": ch["prompt_token_ids"]} if sent + j == 0 else {}
                yield {"choices": [{"index": ch["index"], "text": "", "token_ids": [tok], **first}]}
            yield {
                "choices": [
                    {
                        "index": ch["index"],
                        "text": ch["text"],
                        "finish_reason": ch["finish_reason"],
                        "token_ids": [],
                    }
                ]
            }

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        base = self._base(url)
        if url.endswith("/v1/models"):
            return 200, json.dumps({"object": "list", "data": [{"id": m} for m in self.served_models]})
        if url.endswith("/get_model_info"):
            return 404, "not found"
        self.log.health_checks.append(base)
        if base in self.replicas and self.replicas[base].dead:
            raise ReplicaDownError(f"{url}: connection refused")
        f = self.faults.get(base, StubFault())
        if f.refuse or (f.die_after_s is not None and self._clock() >= f.die_after_s):
            raise ReplicaDownError(f"{url}: connection refused")
        return 200, ""

    async def aclose(self) -> None:
        return None
