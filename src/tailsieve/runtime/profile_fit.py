"""Measured decode points and the throughput profile fitted from them.

A ``BatchMeasurement`` is ``tau`` at one batch size as ``profiler`` measures it: the difference
of the median end times of a full round (``tokens`` per request) and a short one
(``SHORT_FRACTION`` of them) over the tokens between them. ``build_model`` turns a sweep of
them into a monotone ``ThroughputModel`` (the running maximum; with a context term ``k`` from
``fit_context``, the points moved to zero context and a straight-line fit ``a0 + c_s * b``
recorded in ``provenance``), ``mean_profile`` one profile for a fleet of like replicas, and a
``ProfileResult`` holds a profile with the raw measurements it came from. Used by
``profiler.profile_endpoints``, ``tailsieve profile`` and the real-server demo.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.model.throughput import ThroughputModel

SHORT_FRACTION = 0.25  # the short round asks for this fraction of the tokens


@dataclass(frozen=True, slots=True)
class BatchMeasurement:
    """The measurement at one batch size."""

    batch_size: int  # concurrent requests
    step_s: float  # seconds per decode step (difference of the median end times)
    first_done_step_s: float  # same from the first-finishing request of each round (min)
    last_done_step_s: float  # same from the last-finishing request of each round (max)
    overhead_s: float  # median end time of the full round minus tokens * step_s
    wall_s: float  # wall time of the full round, seconds
    prompt_tokens: int = 0  # prompt tokens of every request, as the server counted them


@dataclass(frozen=True, slots=True)
class ProfileResult:
    """All measurements plus the profile built from them."""

    model: ThroughputModel
    measurements: tuple[BatchMeasurement, ...]
    context_measurements: tuple[BatchMeasurement, ...] = ()  # the k sweep (fixed batch)

    def to_dict(self) -> dict[str, Any]:
        """The profile JSON (loadable by ``load_profile``) with the raw measurements added."""
        data = self.model.to_dict()
        data["measurements"] = [_row(m) for m in self.measurements]
        if self.context_measurements:
            data["context_measurements"] = [_row(m) for m in self.context_measurements]
        return data


def _row(m: BatchMeasurement) -> dict[str, Any]:
    return {
        "batch_size": m.batch_size,
        "prompt_tokens": m.prompt_tokens,
        "step_s": m.step_s,
        "first_done_step_s": m.first_done_step_s,
        "last_done_step_s": m.last_done_step_s,
        "overhead_s": m.overhead_s,
        "wall_s": m.wall_s,
    }


def fit_context(measurements: Sequence[BatchMeasurement]) -> float:
    """``k``: least-squares slope of ``step_s`` over the context ``b x prompt_tokens`` held by
    the batch (clamped at 0; 0 with fewer than two distinct contexts)."""
    xs = [m.batch_size * m.prompt_tokens for m in measurements]
    if len(set(xs)) < 2:
        return 0.0
    slope, _ = np.polyfit(np.array(xs, dtype=np.float64),
                          np.array([m.step_s for m in measurements], dtype=np.float64), 1)
    return max(float(slope), 0.0)


def build_model(measurements: list[BatchMeasurement], name: str, source: str,
                context_s_per_token: float = 0.0, tokens: int = 0,
                provenance: dict[str, Any] | None = None) -> ThroughputModel:
    """A monotone profile from measurements (running maximum of ``step_s``). With a context
    term ``k`` the points are moved to zero context: each loses ``k`` times the context its
    batch held on average over the measured window (prompt + 5/8 of ``tokens`` per request)."""
    mean_generated = (SHORT_FRACTION + 1.0) / 2.0 * tokens
    pairs: list[tuple[int, float]] = []
    top = 0.0
    for m in measurements:
        held = m.batch_size * (m.prompt_tokens + mean_generated)
        at_zero = max(m.step_s - context_s_per_token * held, 0.05 * m.step_s)
        top = max(top, at_zero)
        pairs.append((m.batch_size, top))
    base = ThroughputModel.from_pairs(pairs, name=name, source=source)
    prov: dict[str, Any] = {"kind": "measured", **(provenance or {})}
    if len(pairs) >= 2:
        c_s, a0 = np.polyfit(np.array([b for b, _ in pairs], dtype=np.float64),
                             np.array([t for _, t in pairs], dtype=np.float64), 1)
        prov["fit"] = {"a0_s": float(a0), "c_s_per_request": float(c_s),
                       "k_s_per_token": context_s_per_token,
                       "form": "tau(b, C) = a0 + c_s * b + k * C (least squares over the points)"}
    return replace(base, context_s_per_token=context_s_per_token, provenance=prov)


def mean_profile(results: Sequence[ProfileResult], name: str) -> ThroughputModel:
    """One profile for a fleet of like replicas: the mean ``tau(b)`` of several measured ones
    (running maximum, as ``build_model``)."""
    if not results:
        raise ConfigError("no profile to average")
    sizes = [m.batch_size for m in results[0].measurements]
    for r in results[1:]:
        if [m.batch_size for m in r.measurements] != sizes:
            raise ConfigError("profiles to average must share their batch sizes")
    pairs: list[tuple[int, float]] = []
    top = 0.0
    at_zero = any(r.model.context_s_per_token > 0 for r in results)  # points moved by k
    for j, b in enumerate(sizes):
        top = max(top, statistics.fmean(
            r.model.points[j].step_s if at_zero else r.measurements[j].step_s for r in results))
        pairs.append((b, top))
    sources = "; ".join(r.model.source for r in results)
    k = statistics.fmean(r.model.context_s_per_token for r in results)
    base = ThroughputModel.from_pairs(pairs, name=name, source=f"mean of {len(results)}: {sources}")
    return replace(base, context_s_per_token=k,
                   provenance={"kind": "measured", "mean_of": len(results)})
