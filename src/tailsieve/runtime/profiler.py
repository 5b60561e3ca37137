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

With ``context_lengths`` the profiler also fits the context term ``k`` of ``tau(b, C) =
tau(b, 0) + k * C`` (``C`` = context tokens held by the batch): at a fixed batch it repeats the
measurement with prompts of those lengths (in tokens, as the server counts them); ``k`` is the
slope of ``tau`` over ``b x prompt_tokens``. The batch-size points are then reported at zero
context (the context they were measured at, ``b x (prompt + 5/8 x tokens)`` on average over
the measured window, times ``k``, subtracted), and ``a0`` (the intercept) and ``c_s`` (the
slope) of a straight-line fit are recorded in ``provenance``: the same kind of file as a
derived GPU profile. The fitting (``fit_context``, ``build_model``, ``mean_profile``) and the
measurements' types are ``profile_fit``'s; this module measures.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from tailsieve.errors import ConfigError, ProfileError, ReplicaError
from tailsieve.runtime.engine.backends import SamplingParams
from tailsieve.runtime.engine.faults import ReplicaDownError
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import PieceRequest
from tailsieve.runtime.engine.served_models import resolve_served_model
from tailsieve.runtime.engine.transport import AiohttpTransport, Transport
from tailsieve.runtime.profile_fit import (
    SHORT_FRACTION,
    BatchMeasurement,
    ProfileResult,
    build_model,
    fit_context,
)

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True, slots=True)
class ProfileSettings:
    """What to measure and how."""

    endpoint: str  # base URL of the replica, e.g. http://127.0.0.1:8000
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES  # concurrent requests per measurement
    tokens: int = 200  # max_tokens (= exact response length with ignore_eos) per request
    model: str | None = None  # served model name; None = the one the server serves
    prompt: str = "hello"  # prompt text of every request
    timeout_s: float = 600.0  # limit for one batch, seconds
    warmup: bool = True  # send one short request first (compilation, caches)
    repeats: int = 1  # pairs of rounds per batch size; tau is the median over them
    context_lengths: tuple[int, ...] = ()  # prompt lengths (tokens) of the k sweep; () = no k
    context_batch: int = 8  # concurrent requests of every round of the k sweep

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
        if any(n < 1 for n in self.context_lengths) or \
                list(self.context_lengths) != sorted(set(self.context_lengths)):
            raise ConfigError("context lengths must be positive and strictly increasing, got "
                              f"{self.context_lengths}")
        if self.context_batch < 1:
            raise ConfigError(f"context batch must be >= 1, got {self.context_batch}")

async def detect_model(transport: Transport, endpoint: str) -> str:
    """The one model served at ``endpoint`` (``resolve_served_model``: GET
    /v1/models, else SGLang's /get_model_info); several models are a ``ConfigError`` listing
    them."""
    try:
        return await resolve_served_model([endpoint], transport=transport)
    except ReplicaDownError as exc:
        raise ReplicaError(f"cannot reach {endpoint}: {exc}") from None


async def _one_request(runner: HttpPieceRunner, prompt: str, tokens: int,
                       t0: float) -> tuple[float, int]:
    """One request for exactly ``tokens`` tokens (through the engine client every request goes
    through); its end time after ``t0`` and the prompt tokens the server counted."""
    piece = PieceRequest((), SamplingParams(max_tokens=tokens, temperature=0.0), tokens,
                         f"profile-{uuid.uuid4().hex}", prompt_text=prompt, forced=True)
    out = await runner.run_piece(0, piece)
    end = time.monotonic() - t0
    if out.num_generated != tokens:
        raise ReplicaError(
            f"{runner.endpoints[0]}: asked for exactly {tokens} tokens (ignore_eos) but got "
            f"{out.num_generated}; is the prompt + max_tokens above the server's max_model_len?"
        )
    return end, out.num_prompt_tokens or 0


async def _round(
    runner: HttpPieceRunner, settings: ProfileSettings, b: int, tokens: int
) -> tuple[list[float], int]:
    """``b`` concurrent requests of ``tokens``; their sorted end times and the largest prompt
    token count the server reported."""
    t0 = time.monotonic()
    coros = [_one_request(runner, settings.prompt, tokens, t0) for _ in range(b)]
    try:
        ends = await asyncio.wait_for(asyncio.gather(*coros), settings.timeout_s)
    except TimeoutError:
        raise ReplicaError(
            f"{b} requests of {tokens} tokens took over {settings.timeout_s:g} s"
        ) from None
    return sorted(e for e, _ in ends), max(p for _, p in ends)


async def measure_batch_lockstep(
    runners: Sequence[HttpPieceRunner],
    settings: Sequence[ProfileSettings],
    b: int,
) -> list[BatchMeasurement]:
    """``tau(b)`` of every endpoint from short and full rounds of ``b`` concurrent requests
    (the median over ``repeats`` pairs of rounds). Every round starts on all endpoints together
    and the next waits for all to finish, so each is measured while the others run the same
    batch (the load of a rollout step on shared hardware); one endpoint is the plain case.
    ``runners[i]`` sends ``settings[i]``'s requests."""
    first = settings[0]
    full = first.tokens
    short = max(1, round(full * SHORT_FRACTION))
    span = full - short
    pairs: list[list[tuple[list[float], list[float]]]] = [[] for _ in settings]
    prompts = [0 for _ in settings]
    for k in range(first.repeats + EXTRA_PAIRS):
        if k >= first.repeats and all(_step(prs, span) > 0 for prs in pairs):
            break  # a pause during a short round can make the difference <= 0: measure again
        shorts = await asyncio.gather(
            *(_round(r, st, b, short) for r, st in zip(runners, settings, strict=True))
        )
        fulls = await asyncio.gather(
            *(_round(r, st, b, full) for r, st in zip(runners, settings, strict=True))
        )
        for i in range(len(settings)):
            pairs[i].append((shorts[i][0], fulls[i][0]))
            prompts[i] = fulls[i][1]
    for st, prs in zip(settings, pairs, strict=True):
        if _step(prs, span) <= 0:
            raise ProfileError(
                f"{st.endpoint}: batch {b}: {len(prs)} pairs of rounds measured no time per token "
                f"({full} tokens took no longer than {short}); the machine is too noisy: raise "
                "the repeats"
            )
    return [_measurement(b, prs, full, span, p) for prs, p in zip(pairs, prompts, strict=True)]


EXTRA_PAIRS = 4  # pairs of rounds measured beyond ``repeats`` while the step comes out <= 0


def _pair_steps(pairs: list[tuple[list[float], list[float]]], span: int) -> list[float]:
    """Seconds per token of each pair of (short, full) rounds: their medians' difference."""
    return [(statistics.median(f) - statistics.median(s)) / span for s, f in pairs]


def _step(pairs: list[tuple[list[float], list[float]]], span: int) -> float:
    """Seconds per token from pairs of rounds: the median over the pairs."""
    return statistics.median(_pair_steps(pairs, span))


def _measurement(
    b: int, pairs: list[tuple[list[float], list[float]]], full: int, span: int,
    prompt_tokens: int = 0,
) -> BatchMeasurement:
    steps = _pair_steps(pairs, span)
    step = statistics.median(steps)
    ends_full = pairs[steps.index(sorted(steps)[(len(steps) - 1) // 2])][1]
    return BatchMeasurement(
        batch_size=b,
        step_s=step,
        first_done_step_s=min((f[0] - s[0]) / span for s, f in pairs),
        last_done_step_s=max((f[-1] - s[-1]) / span for s, f in pairs),
        overhead_s=statistics.median(ends_full) - full * step,
        wall_s=ends_full[-1],
        prompt_tokens=prompt_tokens,
    )


async def profile_endpoints(
    settings: Sequence[ProfileSettings], names: Sequence[str | None] | None = None
) -> list[ProfileResult]:
    """Sweep several endpoints in lockstep (``measure_batch_lockstep``): one profile each.

    All settings must share the batch sizes, tokens and repeats (one sweep)."""
    if not settings:
        raise ConfigError("no endpoint to profile")
    first = settings[0]
    for st in settings[1:]:
        if (st.batch_sizes, st.tokens, st.repeats) != (
            first.batch_sizes,
            first.tokens,
            first.repeats,
        ):
            raise ConfigError(
                "endpoints profiled together need the same batch sizes, tokens and repeats"
            )
    endpoints = [st.endpoint.rstrip("/") for st in settings]
    if len(set(endpoints)) != len(endpoints):
        raise ConfigError(f"an endpoint is listed twice: {endpoints}")
    settings = [replace(st, endpoint=ep) for st, ep in zip(settings, endpoints, strict=True)]
    transport = AiohttpTransport()  # no retries: a failed request fails the sweep
    try:
        models = [st.model or await detect_model(transport, st.endpoint) for st in settings]
        runners = [HttpPieceRunner([st.endpoint], model=mdl, transport=transport,
                                   request_timeout_s=None, max_retries=0,
                                   return_token_ids=False)
                   for st, mdl in zip(settings, models, strict=True)]
        for st, runner in zip(settings, runners, strict=True):
            if st.warmup:
                await _one_request(runner, st.prompt, 8, time.monotonic())
        per_b = [await measure_batch_lockstep(runners, settings, b) for b in first.batch_sizes]
        per_ctx = [
            await measure_batch_lockstep(
                runners, [replace(st, prompt=long_prompt(n)) for st in settings],
                first.context_batch)
            for n in first.context_lengths
        ]
        if per_ctx:  # the base prompt at the same batch anchors the fit
            base = (per_b[first.batch_sizes.index(first.context_batch)]
                    if first.context_batch in first.batch_sizes
                    else await measure_batch_lockstep(runners, settings, first.context_batch))
            per_ctx.insert(0, base)
    finally:
        await transport.aclose()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    bs = ",".join(str(b) for b in first.batch_sizes)
    together = (
        f", measured in lockstep with {len(settings) - 1} other endpoint(s)"
        if len(settings) > 1
        else ""
    )
    out = []
    for i, (st, mdl) in enumerate(zip(settings, models, strict=True)):
        source = (
            f"Measured by `tailsieve profile` against {st.endpoint} (model {mdl}) on {date}: "
            f"batch sizes {bs}, {st.tokens} tokens per request (ignore_eos), "
            f"{st.repeats} repeat(s){together}; tau = difference "
            "of median response end times of a full and a quarter-length round over the tokens "
            "between them."
        )
        name = (names[i] if names else None) or f"measured-{mdl}".replace("/", "_")
        ms = [row[i] for row in per_b]
        cms = [row[i] for row in per_ctx]
        k = fit_context(cms)
        if cms:
            source += (f" Context term k from {len(cms)} rounds of {st.context_batch} requests "
                       f"with prompts of {', '.join(str(m.prompt_tokens) for m in cms)} tokens; "
                       "points moved to zero context.")
        prov = {"endpoint": st.endpoint, "served_model": mdl, "date": date,
                "tokens": st.tokens, "repeats": st.repeats}
        model = build_model(ms, name, source, k, st.tokens, prov)
        out.append(ProfileResult(model, tuple(ms), tuple(cms)))
    return out


def long_prompt(num_words: int) -> str:
    """A prompt of ``num_words`` repeated words (about one token each; the server's own count
    is what the fit uses)."""
    return " ".join(["hello"] * num_words)
