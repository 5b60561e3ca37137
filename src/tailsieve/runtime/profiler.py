"""Measure a live replica's decode curve ``tau(b)`` and write it as a throughput profile.

For each batch size ``b`` the profiler runs two rounds of ``b`` concurrent ``/v1/completions``
requests with ``ignore_eos=true``: a short one (``max_tokens = T/4``) and a full one
(``max_tokens = T``), and records when each request's response completes. Then

    tau(b) = (median end(T) - median end(T/4)) / (T - T/4)

which cancels everything that does not grow with the response length (HTTP, queueing,
prefill of the b prompts). Streaming timestamps are deliberately not used: on a busy machine
vLLM's API server merges and delays chunks (measured on the CPU build: whole responses
arriving in one burst), so chunk arrival is not a clock, while the end of a response is.
Noise can make a measured ``tau`` dip below the previous one; the profile stores the running
maximum (the model requires a non-decreasing curve) and keeps the raw numbers alongside.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.model.throughput import ThroughputModel

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
SHORT_FRACTION = 0.25  # the short round asks for this fraction of the tokens


@dataclass(frozen=True, slots=True)
class ProfileSettings:
    """What to measure and how."""

    endpoint: str  # base URL of the replica, e.g. http://127.0.0.1:8000
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES  # concurrent requests per measurement
    tokens: int = 200  # max_tokens (= exact response length with ignore_eos) per request
    model: str | None = None  # served model name; None = the first of GET /v1/models
    prompt: str = "hello"  # prompt text of every request
    timeout_s: float = 600.0  # limit for one batch, seconds
    warmup: bool = True  # send one short request first (compilation, caches)
    repeats: int = 1  # pairs of rounds per batch size; tau is the median over them

    def __post_init__(self) -> None:
        if not self.endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"endpoint must be an http(s) URL, got {self.endpoint!r}")
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ConfigError(f"batch sizes must be >= 1, got {self.batch_sizes}")
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ConfigError(f"batch sizes must be strictly increasing, got {self.batch_sizes}")
        if self.tokens < 20:
            raise ConfigError(f"tokens must be >= 20 to measure a decode rate, got {self.tokens}")
        if self.repeats < 1:
            raise ConfigError(f"repeats must be >= 1, got {self.repeats}")
        if self.timeout_s <= 0:
            raise ConfigError(f"timeout_s must be > 0, got {self.timeout_s}")


@dataclass(frozen=True, slots=True)
class BatchMeasurement:
    """The measurement at one batch size."""

    batch_size: int  # concurrent requests
    step_s: float  # seconds per decode step (difference of the median end times)
    first_done_step_s: float  # same from the first-finishing request of each round (min)
    last_done_step_s: float  # same from the last-finishing request of each round (max)
    overhead_s: float  # median end time of the full round minus tokens * step_s
    wall_s: float  # wall time of the full round, seconds


@dataclass(frozen=True, slots=True)
class ProfileResult:
    """All measurements plus the profile built from them."""

    model: ThroughputModel
    measurements: tuple[BatchMeasurement, ...]

    def to_dict(self) -> dict[str, Any]:
        """The profile JSON (loadable by ``load_profile``) with the raw measurements added."""
        data = self.model.to_dict()
        data["measurements"] = [
            {
                "batch_size": m.batch_size,
                "step_s": m.step_s,
                "first_done_step_s": m.first_done_step_s,
                "last_done_step_s": m.last_done_step_s,
                "overhead_s": m.overhead_s,
                "wall_s": m.wall_s,
            }
            for m in self.measurements
        ]
        return data


async def detect_model(session: aiohttp.ClientSession, endpoint: str) -> str:
    """The first model id served at ``endpoint`` (GET /v1/models)."""
    data = await _get_json(session, f"{endpoint}/v1/models")
    try:
        return str(data["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise ReplicaError(f"{endpoint}/v1/models: no model listed ({str(data)[:200]})") from None


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    try:
        async with session.get(url) as resp:
            if resp.status != 200:
                raise ReplicaError(f"GET {url}: HTTP {resp.status}: {(await resp.text())[:200]}")
            return await resp.json()
    except (aiohttp.ClientError, OSError) as exc:
        raise ReplicaError(f"cannot reach {url}: {exc}") from None


async def _one_request(
    session: aiohttp.ClientSession, endpoint: str, model: str, prompt: str, tokens: int, t0: float
) -> float:
    """One request for exactly ``tokens`` tokens; returns its end time after ``t0``."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    url = f"{endpoint}/v1/completions"
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                raise ReplicaError(f"POST {url}: HTTP {resp.status}: {(await resp.text())[:300]}")
            out = await resp.json()
    except (aiohttp.ClientError, OSError) as exc:
        raise ReplicaError(f"POST {url}: {exc}") from None
    end = time.monotonic() - t0
    got = out.get("usage", {}).get("completion_tokens") if isinstance(out, dict) else None
    if got != tokens:
        raise ReplicaError(
            f"{endpoint}: asked for exactly {tokens} tokens (ignore_eos) but usage says {got}; "
            "is the prompt + max_tokens above the server's max_model_len?"
        )
    return end


async def _round(
    session: aiohttp.ClientSession, settings: ProfileSettings, model: str, b: int, tokens: int
) -> list[float]:
    """``b`` concurrent requests of ``tokens``; their sorted end times."""
    t0 = time.monotonic()
    coros = [
        _one_request(session, settings.endpoint, model, settings.prompt, tokens, t0)
        for _ in range(b)
    ]
    try:
        ends = await asyncio.wait_for(asyncio.gather(*coros), settings.timeout_s)
    except TimeoutError:
        raise ReplicaError(
            f"{b} requests of {tokens} tokens took over {settings.timeout_s:g} s"
        ) from None
    return sorted(ends)


async def measure_batch(
    session: aiohttp.ClientSession, settings: ProfileSettings, model: str, b: int
) -> BatchMeasurement:
    """Measure ``tau(b)`` from short and full rounds of ``b`` concurrent requests (the median
    over ``settings.repeats`` pairs of rounds)."""
    full = settings.tokens
    short = max(1, round(full * SHORT_FRACTION))
    span = full - short
    pairs = []
    for _ in range(settings.repeats):
        ends_short = await _round(session, settings, model, b, short)
        ends_full = await _round(session, settings, model, b, full)
        pairs.append((ends_short, ends_full))
    steps = [(statistics.median(f) - statistics.median(s)) / span for s, f in pairs]
    step = statistics.median(steps)
    ends_full = pairs[steps.index(sorted(steps)[(len(steps) - 1) // 2])][1]
    return BatchMeasurement(
        batch_size=b,
        step_s=step,
        first_done_step_s=min((f[0] - s[0]) / span for s, f in pairs),
        last_done_step_s=max((f[-1] - s[-1]) / span for s, f in pairs),
        overhead_s=statistics.median(ends_full) - full * step,
        wall_s=ends_full[-1],
    )


def build_model(measurements: list[BatchMeasurement], name: str, source: str) -> ThroughputModel:
    """A monotone profile from measurements (running maximum of ``step_s``)."""
    pairs: list[tuple[int, float]] = []
    top = 0.0
    for m in measurements:
        top = max(top, m.step_s)
        pairs.append((m.batch_size, top))
    return ThroughputModel.from_pairs(pairs, name=name, source=source)


async def profile_endpoint(settings: ProfileSettings, name: str | None = None) -> ProfileResult:
    """Run the whole sweep against ``settings.endpoint``."""
    endpoint = settings.endpoint.rstrip("/")
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    # a fresh connection per request: servers close idle keep-alive connections (uvicorn: 5 s)
    # and reusing one they just closed fails with "Server disconnected"
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        model = settings.model or await detect_model(session, endpoint)
        if settings.warmup:
            await _one_request(session, endpoint, model, settings.prompt, 8, time.monotonic())
        out: list[BatchMeasurement] = []
        for b in settings.batch_sizes:
            out.append(await measure_batch(session, settings, model, b))
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    bs = ",".join(str(b) for b in settings.batch_sizes)
    source = (
        f"Measured by `tailsieve profile` against {endpoint} (model {model}) on {date}: "
        f"batch sizes {bs}, {settings.tokens} tokens per request (ignore_eos), "
        f"{settings.repeats} repeat(s); tau = difference "
        "of median response end times of a full and a quarter-length round over the tokens "
        "between them."
    )
    result = build_model(out, name or f"measured-{model}".replace("/", "_"), source)
    return ProfileResult(result, tuple(out))
