"""One-call oracle report for a set of lengths, and the best-k gap study (paper A.4)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError, TraceError
from tailsieve.model.replica_time import all_admit_time
from tailsieve.model.throughput import ThroughputModel
from tailsieve.oracle.bounds import makespan_lower_bound
from tailsieve.oracle.pareto_dp import OptimalSplit, solve_two_replicas, validate_lengths
from tailsieve.oracle.topk import TopKSweep, topk_sweep

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class OracleSummary:
    """2-replica comparison of uniform alternation, best top-k and the exact optimum."""

    profile: str
    num_requests: int
    total_tokens: int
    uniform_makespan_s: float  # requests alternate A, B, A, ... in the given order
    optimal_makespan_s: float
    best_k: int
    topk_makespan_s: float
    topk_gap: float  # topk / optimal - 1
    lower_bound_s: float  # oracle.bounds.makespan_lower_bound on 2 replicas (context included)
    retained_states: int
    solve_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def uniform_alternating_makespan_s(
    lengths: npt.ArrayLike, model: ThroughputModel, prompt_tokens: npt.ArrayLike | None = None
) -> float:
    """Makespan when requests alternate between 2 replicas in the given order."""
    arr = np.asarray(lengths, dtype=np.float64)
    pt = None if prompt_tokens is None else np.asarray(prompt_tokens, dtype=np.float64)
    return max(
        all_admit_time(arr[r::2], model, None if pt is None else pt[r::2]) for r in (0, 1)
    )


def summarize(
    lengths: npt.ArrayLike, model: ThroughputModel, prompt_tokens: npt.ArrayLike | None = None
) -> tuple[OracleSummary, OptimalSplit, TopKSweep]:
    """Solve the exact optimum and the top-k sweep for 2 replicas and summarise them
    (``prompt_tokens``: per request, context under the profile's context term)."""
    arr = validate_lengths(lengths)
    if arr.size == 0:
        raise TraceError("no request lengths given")
    opt = solve_two_replicas(arr, model, prompt_tokens=prompt_tokens)
    sweep = topk_sweep(arr, model, prompt_tokens)
    # the top-k split is feasible, so the true gap is >= 0; a negative value is rounding
    gap = max(sweep.best_makespan_s / opt.makespan_s - 1.0, 0.0) if opt.makespan_s > 0 else 0.0
    summary = OracleSummary(
        profile=model.name,
        num_requests=int(arr.size),
        total_tokens=int(arr.sum()),
        uniform_makespan_s=uniform_alternating_makespan_s(arr, model, prompt_tokens),
        optimal_makespan_s=opt.makespan_s,
        best_k=sweep.best_k,
        topk_makespan_s=sweep.best_makespan_s,
        topk_gap=gap,
        lower_bound_s=makespan_lower_bound(arr, model, num_replicas=2,
                                           prompt_tokens=prompt_tokens),
        retained_states=opt.retained_states,
        solve_s=opt.solve_s,
    )
    return summary, opt, sweep


@dataclass(frozen=True, slots=True)
class GapStudy:
    """Best-k gap to the exact optimum over random draws (paper appendix A.4)."""

    profile: str
    num_draws: int
    num_requests: int  # per draw
    gap_median: float
    gap_p90: float
    gap_max: float
    solve_s_median: float
    retained_states_median: float
    gaps: tuple[float, ...]  # per draw, in draw order

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["gaps"] = list(self.gaps)
        return out


def sample_requests(pool: npt.ArrayLike, num_requests: int, rng: np.random.Generator) -> FloatArray:
    """``num_requests`` lengths drawn without replacement from ``pool`` (0 = all, in order)."""
    arr = np.asarray(pool, dtype=np.float64)
    if num_requests < 0:
        raise ConfigError(f"--sample-requests must be >= 0, got {num_requests}")
    if num_requests == 0:
        return arr.copy()
    if num_requests > arr.size:
        raise ConfigError(f"cannot sample {num_requests} requests from {arr.size} lengths")
    return arr[rng.choice(arr.size, size=num_requests, replace=False)]


def gap_study(
    pool: npt.ArrayLike,
    model: ThroughputModel,
    num_draws: int,
    num_requests: int,
    rng: np.random.Generator,
    prompt_pool: npt.ArrayLike | None = None,
) -> GapStudy:
    """For ``num_draws`` random draws of ``num_requests`` lengths from ``pool`` (with their
    ``prompt_pool`` entries, when given), the gap of the best top-k split to the exact
    2-replica optimum."""
    if num_draws < 1:
        raise ConfigError(f"--draws must be >= 1, got {num_draws}")
    gaps, solve, states = [], [], []
    arr = np.asarray(pool, dtype=np.float64)
    prompts = None if prompt_pool is None else np.asarray(prompt_pool, dtype=np.float64)
    for _ in range(num_draws):
        idx = sample_requests(np.arange(arr.size), num_requests, rng).astype(int)
        summary, _, _ = summarize(arr[idx], model, None if prompts is None else prompts[idx])
        gaps.append(summary.topk_gap)
        solve.append(summary.solve_s)
        states.append(summary.retained_states)
    g = np.array(gaps)
    return GapStudy(
        profile=model.name,
        num_draws=num_draws,
        num_requests=num_requests,
        gap_median=float(np.median(g)),
        gap_p90=float(np.percentile(g, 90)),
        gap_max=float(g.max()),
        solve_s_median=float(np.median(solve)),
        retained_states_median=float(np.median(states)),
        gaps=tuple(float(x) for x in g),
    )
