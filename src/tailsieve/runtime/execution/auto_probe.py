"""The short probe of ``profile="auto"`` when no fallback profile is named: a model of the
replicas before any of the rollout's own pieces is timed.

Decode: for each batch size ``b`` (1, the expected requests per replica ``L``, and their
geometric mean), a round of ``b`` concurrent requests of exactly ``tokens / 4`` tokens and one of
``tokens`` tokens (``ignore_eos``) on every replica at once, as ``tailsieve profile`` does;
``tau(b)`` is the difference of the two rounds' median end times over the tokens between them,
which cancels what does not grow with the length (HTTP, the spread of arrivals, queueing, the
prompts' prefill). Averaged over the replicas, running maximum over ``b``. Prefill: one-token
requests with prompts of distinct words (no prefix-cache hit) of two lengths; the slope of their
times over the prompt tokens the server counted (``model.online_fit.fit_prefill``). Through the
engine client every request goes through (``HttpPieceRunner``; over a stub transport in tests).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.model.decode_observations import PrefillObservation
from tailsieve.model.online_fit import fit_prefill
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.engine.backends import SamplingParams
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import PieceRequest

WORDS = ("time", "river", "stone", "light", "paper", "green", "seven", "market", "winter",
         "garden", "number", "yellow", "signal", "forest", "silver", "engine")


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """What the probe sends."""

    tokens: int = 64  # tokens per request of the full rounds (the short ones: a quarter)
    max_batch: int = 64  # largest batch probed (the expected load per replica, capped here)
    prefill_words: tuple[int, ...] = (16, 192)  # prompt lengths of the one-token requests
    prefill_repeats: int = 3  # one-token requests per prompt length and replica
    extra_pairs: int = 2  # pairs of rounds measured again where the first gives no time
    timeout_s: float = 120.0  # limit per request, seconds

    def __post_init__(self) -> None:
        if self.tokens < 8 or self.max_batch < 1 or self.prefill_repeats < 0:
            raise ConfigError("probe: need tokens >= 8, max_batch >= 1, prefill_repeats >= 0")
        if self.extra_pairs < 0 or self.timeout_s <= 0:
            raise ConfigError("probe: need extra_pairs >= 0 and timeout_s > 0")

    def batch_sizes(self, load: int) -> tuple[int, ...]:
        """1, the expected load per replica (capped) and their geometric mean."""
        top = max(2, min(load, self.max_batch))
        return tuple(sorted({1, round(math.sqrt(top)), top}))


async def probe_replicas(runner: HttpPieceRunner, replicas: Sequence[int], load: int,
                         settings: ProbeSettings | None = None) -> ThroughputModel:
    """The mean decode curve and prefill rate of ``runner``'s ``replicas`` (see the module
    docstring). A replica that fails is left out; all failing is a ``ReplicaError``."""
    st = settings or ProbeSettings()
    alive = list(replicas)
    short = max(2, st.tokens // 4)
    pairs: list[tuple[int, float]] = []
    for b in st.batch_sizes(load):
        for _ in range(1 + st.extra_pairs):
            ends_short = await _lockstep(runner, alive, b, short, st)
            ends_full = await _lockstep(runner, alive, b, st.tokens, st)
            alive = [u for u in alive if u in ends_short and u in ends_full]
            if not alive:
                raise ReplicaError(f"auto profile: the probe failed on every replica ("
                                   f"{', '.join(runner.endpoints[r] for r in replicas)}); "
                                   "name a fallback (auto:NAME)")
            taus = [(statistics.median(ends_full[u]) - statistics.median(ends_short[u]))
                    / (st.tokens - short) for u in alive]
            if min(taus) > 0:
                pairs.append((b, statistics.fmean(taus)))
                break
    if not pairs:
        raise ReplicaError("auto profile: the probe measured no time per token (the machine "
                           "is too noisy); name a fallback (auto:NAME)")
    top = 0.0
    curve = []
    for b, t in pairs:
        top = max(top, t)
        curve.append((b, top))
    prefill = fit_prefill(await _prefills(runner, alive, st))
    out = ThroughputModel.from_pairs(curve, name="auto-probe", source=(
        f"short lockstep probe of {len(alive)} replica(s): rounds of {short} and {st.tokens} "
        f"tokens at batch sizes {', '.join(str(b) for b, _ in pairs)}"))
    return ThroughputModel(points=out.points, name=out.name, source=out.source,
                           provenance={"kind": "probe",
                                       "replicas": [runner.endpoints[r] for r in alive]},
                           prefill=prefill)


async def _lockstep(runner: HttpPieceRunner, replicas: list[int], b: int, tokens: int,
                    st: ProbeSettings) -> dict[int, list[float]]:
    """``b`` requests of exactly ``tokens`` on every replica at once: each replica that
    answered them all -> their end times after the round began."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def one(r: int) -> list[float]:
        got = await asyncio.gather(*(_timed(runner, r, "hello", tokens, st.timeout_s)
                                     for _ in range(b)))
        return [t0_s + s - t0 for s, _, t0_s in got]

    got = await asyncio.gather(*(one(r) for r in replicas), return_exceptions=True)
    return {r: g for r, g in zip(replicas, got, strict=True)
            if not isinstance(g, BaseException)}


async def _prefills(runner: HttpPieceRunner, replicas: list[int],
                    st: ProbeSettings) -> list[PrefillObservation]:
    rng = np.random.default_rng(0)
    out: list[PrefillObservation] = []
    for _ in range(st.prefill_repeats):
        for words in st.prefill_words:
            got = await asyncio.gather(
                *(_timed(runner, r, _distinct_text(rng, words), 1, st.timeout_s)
                  for r in replicas), return_exceptions=True)
            out.extend(PrefillObservation(p, s) for g in got if not isinstance(g, BaseException)
                       for s, p, _ in [g] if p > 0 and s > 0)
    return out


async def _timed(runner: HttpPieceRunner, replica: int, text: str, tokens: int,
                 timeout_s: float) -> tuple[float, int, float]:
    """One request for exactly ``tokens`` tokens: its seconds, the prompt tokens the server
    counted (0: not said) and when it was sent."""
    piece = PieceRequest((), SamplingParams(max_tokens=tokens), tokens,
                         f"probe-{uuid.uuid4().hex}", prompt_text=text, forced=True)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out = await asyncio.wait_for(runner.run_piece(replica, piece), timeout_s)
    return loop.time() - t0, out.num_prompt_tokens or 0, t0


def _distinct_text(rng: np.random.Generator, words: int) -> str:
    """A prompt of ``words`` random words (no two alike: no prefix-cache hit)."""
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), words))
