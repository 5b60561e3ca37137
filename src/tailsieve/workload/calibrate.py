"""Calibrating ``SyntheticParams`` to target statistics, and fitting them to a user's trace.

``calibrate(targets)`` solves for the median, total log spread, prompt share and run-away rate
so that a simulated single-step trace hits P50, P90, the truncated fraction and the prompt share
(common random numbers, damped fixed-point updates; deterministic). ``fit_synthetic(trace)``
measures those targets (plus checkpoint drift and prompt x checkpoint interaction when the trace
has several steps) and calibrates to them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from tailsieve.errors import TraceError
from tailsieve.workload.analytics import (
    between_prompt_share,
    percentiles,
    truncated_fraction,
    variance_decomposition,
)
from tailsieve.workload.synthetic import SyntheticParams, compress_upper
from tailsieve.workload.trace import Trace

ShareKind = Literal["log", "raw"]


@dataclass(frozen=True, slots=True)
class CalibrationTargets:
    """Statistics a synthetic workload should reproduce (one step, ``samples`` per prompt)."""

    p50_tokens: float
    p90_tokens: float
    truncated_fraction: float
    prompt_share: float  # between-prompt share of (log or raw) length variance at one step
    max_tokens: int
    share_kind: ShareKind = "log"
    samples: int = 8
    interaction_sigma_log: float = 0.0
    drift_sigma_log: float = 0.0
    drift_mean_log: float = 0.0
    runaway_prompt_coef: float = 1.5


def _simulate(
    t: CalibrationTargets,
    mu: float,
    tot: float,
    h: float,
    tail: float,
    z: dict[str, np.ndarray],
) -> tuple[float, float, float, float]:
    marginal, kappa = _split_tail(tail)
    r = _base_runaway(marginal, t.runaway_prompt_coef, z["a"])
    body_var = tot * tot
    ps = math.sqrt(h * body_var)
    ss = math.sqrt((1 - h) * body_var)
    a = ps * z["a"]
    dev = (a + t.interaction_sigma_log * z["b"])[:, None] + ss * z["e"]
    log_len = mu + compress_upper(dev, kappa)
    lengths = np.clip(np.rint(np.exp(np.minimum(log_len, 30.0))), 1, t.max_tokens)
    if r > 0:
        zz = a / ps if ps > 0 else 0.0
        p_run = 1 / (1 + np.exp(-(math.log(r / (1 - r)) + t.runaway_prompt_coef * zz)))
        lengths[z["u"] < p_run[:, None]] = t.max_tokens
    p50, p90 = np.percentile(lengths, [50, 90])
    trunc = float(np.mean(lengths >= t.max_tokens))
    share = between_prompt_share(lengths, log=t.share_kind == "log")
    return float(p50), float(p90), trunc, share


def _base_runaway(marginal: float, coef: float, z_prompt: np.ndarray) -> float:
    """Base run-away probability whose average over prompts is ``marginal`` (bisection)."""
    if marginal <= 0:
        return 0.0
    lo, hi = -30.0, 10.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        mean = float(np.mean(1 / (1 + np.exp(-(mid + coef * z_prompt)))))
        lo, hi = (mid, hi) if mean < marginal else (lo, mid)
    return float(1 / (1 + math.exp(-0.5 * (lo + hi))))


def _split_tail(tail: float) -> tuple[float, float]:
    """One knob for the top of the distribution: ``tail > 0`` is the mean run-away rate,
    ``tail < 0`` an upper-tail compression of ``-10 * tail``."""
    return (tail, 0.0) if tail >= 0 else (0.0, -10.0 * tail)


def calibrate(
    targets: CalibrationTargets, num_prompts: int = 4000, iterations: int = 80, seed: int = 0
) -> SyntheticParams:
    """Synthetic parameters hitting ``targets`` (see module doc)."""
    t = targets
    if not 0 < t.p50_tokens < t.p90_tokens <= t.max_tokens:
        raise TraceError(f"calibration needs 0 < p50 < p90 <= max_tokens, got {t}")
    rng = np.random.default_rng(seed)
    z = {
        "a": rng.standard_normal(num_prompts),
        "b": rng.standard_normal(num_prompts),
        "e": rng.standard_normal((num_prompts, t.samples)),
        "u": rng.random((num_prompts, t.samples)),
    }
    mu = math.log(t.p50_tokens)
    tot = max(math.log(t.p90_tokens / t.p50_tokens) / 1.2816, 0.05)
    h, tail = min(max(t.prompt_share, 0.05), 0.95), 0.0
    for _ in range(iterations):
        p50, p90, trunc, share = _simulate(t, mu, tot, h, tail, z)
        mu += 0.8 * math.log(t.p50_tokens / p50)
        ratio = math.log(t.p90_tokens / t.p50_tokens) / max(math.log(p90 / p50), 1e-6)
        tot = min(max(tot * ratio**0.8, 0.02), 5.0)
        h = min(max(h + 0.7 * (t.prompt_share - share), 0.01), 0.99)
        tail = min(max(tail + 0.8 * (t.truncated_fraction - trunc), -0.5), 0.5)
    marginal, kappa = _split_tail(tail)
    r = _base_runaway(marginal, t.runaway_prompt_coef, z["a"])
    return SyntheticParams(
        median_tokens=round(math.exp(mu), 1),
        prompt_sigma_log=round(math.sqrt(h) * tot, 4),
        sample_sigma_log=round(math.sqrt(1 - h) * tot, 4),
        interaction_sigma_log=t.interaction_sigma_log,
        drift_sigma_log=t.drift_sigma_log,
        drift_mean_log=t.drift_mean_log,
        runaway_prob=round(r, 6),
        runaway_prompt_coef=t.runaway_prompt_coef,
        upper_compression=round(kappa, 4),
        max_tokens=t.max_tokens,
    )


def measure_targets(trace: Trace, max_tokens: int | None = None) -> CalibrationTargets:
    """The ``CalibrationTargets`` of a recorded trace (log prompt share, averaged over steps)."""
    q = percentiles(trace.response_tokens, (50, 90))
    frac, cap = truncated_fraction(trace, max_tokens)
    top = int(trace.response_tokens.max())
    cap_tokens = max_tokens or cap or (top if frac > 0 else math.ceil(top * 1.25))
    shares = []
    for s in trace.steps.tolist():
        sub = trace.select(trace.step == s)
        if sub.num_prompts >= 2:
            shares.append(variance_decomposition(sub, log=True).shares()["prompt"])
    if not shares:
        raise TraceError(f"{trace.source}: need >= 2 prompts to fit a synthetic workload")
    drift_mean = drift_sigma = inter = 0.0
    counts = np.bincount(trace.cell_index()[2])
    if trace.is_multi_checkpoint:
        steps = trace.steps
        logs = np.log(np.maximum(trace.response_tokens, 1))
        means = np.array([logs[trace.step == s].mean() for s in steps])
        inc = np.diff(means)
        drift_mean = float(inc.mean())
        drift_sigma = float(inc.std(ddof=1)) if inc.size > 1 else abs(float(inc[0]))
        vd = variance_decomposition(trace, log=True)
        ncell = counts.size
        df_int = max((trace.num_prompts - 1) * (steps.size - 1), 1)
        df_samp = max(trace.num_rows - ncell, 1)
        ms_int, ms_samp = vd.interaction / df_int, vd.sampling / df_samp
        inter = math.sqrt(max(0.0, (ms_int - ms_samp) / float(counts.mean())))
    return CalibrationTargets(
        p50_tokens=q["p50"],
        p90_tokens=q["p90"],
        truncated_fraction=frac,
        prompt_share=float(np.mean(shares)),
        max_tokens=int(cap_tokens),
        samples=round(float(counts.mean())),
        interaction_sigma_log=round(inter, 4),
        drift_sigma_log=round(drift_sigma, 4),
        drift_mean_log=round(drift_mean, 4),
    )


def fit_synthetic(trace: Trace, max_tokens: int | None = None) -> SyntheticParams:
    """Synthetic parameters that reproduce ``trace``'s P50, P90, truncated fraction, log
    between-prompt share and (multi-checkpoint) drift and interaction."""
    targets = measure_targets(trace, max_tokens)
    params = calibrate(targets)
    return replace(params, max_tokens=targets.max_tokens)
