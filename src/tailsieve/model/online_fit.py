"""Fit a replica's decode curve ``tau(b) + k * C`` from timed pieces (the ``auto`` profile).

Each observation (``model.decode_observations``) is a request that took part in ``g`` decode
steps over ``t`` seconds while its replica ran the batch ``b_j`` holding ``C_j`` context
tokens for ``d_j`` seconds of its window. The model (docs/performance-model.md, "The formula") is

    t = o + sum_j n_j * (tau(b_j) + k * C_j),    sum_j n_j = g,

with ``o`` the request's fixed cost (HTTP, queueing, its prefill) and ``n_j`` the steps made in
stretch ``j``: ``d_j / step_j`` scaled to sum to ``g`` (one token per step for everyone, so the
stretches' steps follow from their lengths and the step times; iterated from ``n_j ~ d_j``).
``tau`` is piecewise linear over knots at ``1, 2, 4, ..`` up to the largest batch observed,
monotone by construction (its value at 1 plus non-negative increments), and smooth where data
is thin (a small penalty on changes of slope: a straight line ``a0 + c_s * b`` where nothing
says otherwise). Everything is solved at once by non-negative least squares on relative
errors; pieces more than ``trim`` robust deviations off are dropped and the rest refit.
Beyond the largest knot ``ThroughputModel`` continues the table's straight-line fit.

``fit_prefill`` fits seconds per prefilled token from times to first token. Pure: no clock.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ProfileError
from tailsieve.model.decode_observations import PieceObservation, PrefillObservation
from tailsieve.model.nnls import nnls
from tailsieve.model.prefill import PrefillModel
from tailsieve.model.throughput import ThroughputModel, ThroughputPoint

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class FitSettings:
    """How the decode curve is fitted and when the fit is trusted."""

    min_observations: int = 16  # pieces needed before the fit is used
    min_batch_levels: int = 2  # distinct batch sizes (rounded) the pieces must have run at
    max_rel_rmse: float = 0.2  # a fit whose pieces are predicted worse than this is not used
    max_overhead_share: float = 0.25  # nor one whose fixed cost per piece exceeds this share
    # of the median piece's time (the pieces did not separate it from the decode time: the
    # replicas' speed changed while they ran)
    smoothing: float = 1.0  # weight of the slope-change penalty, in units of the data of
    # ``min_observations`` pieces (its share shrinks as pieces accumulate)
    min_context_tokens: float = 256.0  # k is fitted only once the sequences held this many
    # tokens of context each (90th percentile over decode steps); below, k is held at its
    # prior: short contexts (a lockstep probe) cannot tell k from the slope of tau
    trim: float = 4.0  # pieces this many robust deviations off are dropped (0: none)
    iterations: int = 3  # rounds of re-estimating the steps per stretch
    min_prefill_observations: int = 6  # times to first token needed to fit the prefill rate
    speed_prior_pieces: float = 4.0  # a replica's own speed factor is shrunk toward the
    # shared curve by n / (n + this) over its n timed pieces (``model.replica_speeds``)
    speed_band: float = 1.25  # factors all within this ratio of 1: a homogeneous fleet

    def __post_init__(self) -> None:
        if self.min_observations < 2 or self.min_batch_levels < 1 or self.iterations < 1:
            raise ProfileError("fit settings: need min_observations >= 2, min_batch_levels >= 1 "
                               "and iterations >= 1")
        if not (self.max_rel_rmse > 0 and self.smoothing >= 0 and self.trim >= 0
                and self.max_overhead_share > 0):
            raise ProfileError("fit settings: need max_rel_rmse > 0, max_overhead_share > 0, "
                               "smoothing >= 0, trim >= 0")
        if self.min_context_tokens < 0:
            raise ProfileError("fit settings: min_context_tokens must be >= 0")
        if not (math.isfinite(self.speed_prior_pieces) and self.speed_prior_pieces >= 0
                and math.isfinite(self.speed_band) and self.speed_band >= 1):
            raise ProfileError("fit settings: need speed_prior_pieces >= 0 and speed_band >= 1")
        if self.min_prefill_observations < 2:
            raise ProfileError("fit settings: min_prefill_observations must be >= 2")


@dataclass(frozen=True, slots=True)
class FitQuality:
    """How much the fit saw and how well it explains it."""

    num_observations: int  # pieces fitted (after trimming)
    num_trimmed: int  # pieces dropped as outliers
    num_tokens: int  # decode steps those pieces took part in
    batch_min: float  # smallest batch a fitted piece ran at
    batch_max: float  # largest
    batch_levels: int  # distinct batch sizes (rounded to powers of two) with data
    rel_rmse: float  # root-mean-square relative error of the fitted pieces' times
    ready: bool  # enough, varied and well explained: use it
    reason: str  # why not ready ("" when ready)

    def to_dict(self) -> dict[str, object]:
        return {
            "num_observations": self.num_observations, "num_trimmed": self.num_trimmed,
            "num_tokens": self.num_tokens, "batch_range": [self.batch_min, self.batch_max],
            "batch_levels": self.batch_levels, "rel_rmse": round(self.rel_rmse, 6),
            "ready": self.ready, "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class DecodeFit:
    """The fitted curve: ``tau`` at the knots (zero context), ``k`` and the per-request
    fixed cost."""

    knots: tuple[int, ...]  # batch sizes
    tau_s: tuple[float, ...]  # seconds per step at each knot, zero context
    context_s_per_token: float  # k
    overhead_s: float  # o: fixed seconds per request
    quality: FitQuality

    def model(self, name: str = "auto", prefill: PrefillModel | None = None,
              base: ThroughputModel | None = None) -> ThroughputModel:
        """As a ``ThroughputModel`` (caps from ``base``, e.g. the fallback profile)."""
        pts = tuple(ThroughputPoint(b, t) for b, t in zip(self.knots, self.tau_s, strict=True))
        q = self.quality
        return ThroughputModel(
            points=pts, name=name,
            source=(f"fitted online from {q.num_observations} timed pieces ({q.num_tokens} "
                    f"decode steps, batch {q.batch_min:g}-{q.batch_max:g}, relative error "
                    f"{q.rel_rmse:.1%})"),
            context_s_per_token=self.context_s_per_token,
            kv_capacity_tokens=base.kv_capacity_tokens if base is not None else None,
            max_num_seqs=base.max_num_seqs if base is not None else None,
            provenance={"kind": "online-fit", "fit": q.to_dict(),
                        "overhead_s": self.overhead_s},
            prefill=prefill,
        )


def knots_for(max_batch: float) -> tuple[int, ...]:
    """``1, 2, 4, ..`` up to the first power of two at or above ``max_batch``."""
    top = max(1, math.ceil(max_batch))
    out = [1]
    while out[-1] < top:
        out.append(out[-1] * 2)
    return tuple(out)


def ramp_basis(b: FloatArray, knots: Sequence[int]) -> FloatArray:
    """Columns ``[1, H_1(b), .., H_m(b)]`` with ``tau(b) = tau_0 + sum_l delta_l H_l(b)``:
    ``H_l`` rises linearly from 0 at knot ``l - 1`` to 1 at knot ``l`` (and stays 1)."""
    k = np.asarray(knots, dtype=np.float64)
    cols = [np.ones_like(b)]
    for lo, hi in itertools.pairwise(k):
        cols.append(np.clip((b - lo) / (hi - lo), 0.0, 1.0))
    return np.stack(cols, axis=-1)


@dataclass(frozen=True, slots=True)
class _Data:
    """The observations as flat arrays: one row per stretch, ``obs`` its observation."""

    obs: npt.NDArray[np.intp]
    dur: FloatArray
    batch: FloatArray
    ctx: FloatArray
    tokens: FloatArray  # per observation
    time: FloatArray  # per observation

    def starts(self) -> npt.NDArray[np.intp]:
        """Index of each observation's first stretch (stretches are grouped in order)."""
        return np.searchsorted(self.obs, np.arange(len(self.tokens)))

    @classmethod
    def of(cls, observations: Sequence[PieceObservation]) -> _Data:
        lens = [len(o.durations_s) for o in observations]
        f = np.fromiter
        return cls(
            np.repeat(np.arange(len(observations)), lens),
            np.concatenate([np.asarray(o.durations_s, dtype=np.float64) for o in observations]),
            np.concatenate([np.asarray(o.batch, dtype=np.float64) for o in observations]),
            np.concatenate([np.asarray(o.context_tokens, dtype=np.float64)
                            for o in observations]),
            f((o.tokens for o in observations), np.float64, len(observations)),
            f((o.duration_s for o in observations), np.float64, len(observations)),
        )

    def context_p90(self) -> float:
        """90th percentile of the context per running sequence, over the decode steps."""
        per_seq = self.ctx / self.batch
        w = self.dur * self.tokens[self.obs] / self.time[self.obs] * self.batch
        order = np.argsort(per_seq)
        cum = np.cumsum(w[order])
        return float(per_seq[order][min(int(np.searchsorted(cum, 0.9 * cum[-1])),
                                        len(order) - 1)])

    def subset(self, keep: npt.NDArray[np.bool_]) -> _Data:
        rows = keep[self.obs]
        new_index = np.cumsum(keep) - 1
        return _Data(new_index[self.obs[rows]], self.dur[rows], self.batch[rows],
                     self.ctx[rows], self.tokens[keep], self.time[keep])


def fit_decode(observations: Sequence[PieceObservation], settings: FitSettings | None = None,
               context_prior_s_per_token: float = 0.0) -> DecodeFit:
    """The decode curve that best explains ``observations`` (see the module docstring).
    ``k`` is held at ``context_prior_s_per_token`` (e.g. the fallback profile's) while the
    sequences' contexts are too short to measure it (``FitSettings.min_context_tokens``).
    Raises ``ProfileError`` for no observation; a fit on too few or too uniform ones comes
    back with ``quality.ready`` False and the reason."""
    cfg = settings or FitSettings()
    prior = context_prior_s_per_token
    if not (math.isfinite(prior) and prior >= 0):
        raise ProfileError(f"context prior must be a finite number >= 0, got {prior!r}")
    if not observations:
        raise ProfileError("auto profile: no timed piece to fit (need at least one request "
                           "that generated tokens)")
    for o in observations:
        if not isinstance(o, PieceObservation):
            raise ProfileError(f"auto profile: expected PieceObservation, got {type(o).__name__}")
    data = _Data.of(observations)
    knots = knots_for(float(data.batch.max()))
    k0 = None if data.context_p90() >= cfg.min_context_tokens else prior
    coef, pred = _solve(data, knots, cfg, k0)
    num_trimmed = 0
    if cfg.trim > 0 and len(observations) >= 8:
        rel = (pred - data.time) / data.time
        med = float(np.median(rel))
        spread = 1.4826 * float(np.median(np.abs(rel - med)))
        keep = np.abs(rel - med) <= cfg.trim * max(spread, 1e-3)
        if 2 <= int(keep.sum()) < len(keep):
            num_trimmed = int((~keep).sum())
            data = data.subset(keep)
            coef, pred = _solve(data, knots, cfg, k0)
    tau = np.cumsum(coef[: len(knots)])
    floor = 1e-3 * float(tau[-1]) if tau[-1] > 0 else 1e-9
    tau = np.maximum.accumulate(np.maximum(tau, floor))
    quality = _quality(data, knots, pred, num_trimmed, cfg, float(coef[len(knots) + 1]))
    return DecodeFit(knots, tuple(float(t) for t in tau), float(coef[len(knots)]),
                     float(coef[len(knots) + 1]), quality)


def _solve(data: _Data, knots: Sequence[int], cfg: FitSettings,
           k0: float | None) -> tuple[FloatArray, FloatArray]:
    """NNLS for ``[tau_0, delta_1.., k, o]`` (``k`` held at ``k0`` unless None); returns them
    and the predicted piece times."""
    num_obs, m = len(data.tokens), len(knots)
    basis = ramp_basis(data.batch, knots)
    w = np.sqrt(data.tokens) / data.time  # relative errors, longer pieces weigh more
    penalty = _slope_penalty(knots)
    steps = data.dur * data.tokens[data.obs] / data.time[data.obs]
    starts = data.starts()
    cols = np.hstack([basis, data.ctx[:, None]])  # per stretch: tau's columns, then C
    coef = np.zeros(m + 2)
    pred = data.time
    for _ in range(cfg.iterations):
        a = np.ones((num_obs, m + 2))
        a[:, : m + 1] = np.add.reduceat(steps[:, None] * cols, starts, axis=0)
        aw = a * w[:, None]
        rows, rhs = [aw], [data.time * w]
        if cfg.smoothing > 0 and penalty.shape[0]:
            # as strong as ``smoothing`` x ``min_observations`` pieces: it fades as data grow
            scale = cfg.smoothing * float(np.linalg.norm(aw[:, :m])) * math.sqrt(
                cfg.min_observations / num_obs) / max(float(np.linalg.norm(penalty)), 1e-30)
            rows.append(np.hstack([penalty * scale, np.zeros((penalty.shape[0], 2))]))
            rhs.append(np.zeros(penalty.shape[0]))
        if k0 is not None:  # k held: its part of every piece's time is known
            rhs[0] = rhs[0] - k0 * aw[:, m]
            rows[0] = aw.copy()
            rows[0][:, m] = 0.0
        coef = nnls(np.vstack(rows), np.concatenate(rhs))
        if k0 is not None:
            coef[m] = k0
        pred = a @ coef
        step_s = basis @ coef[:m] + coef[m] * data.ctx
        step_s = np.maximum(step_s, 1e-12)
        per = data.dur / step_s
        total = np.add.reduceat(per, starts)
        steps = per * data.tokens[data.obs] / np.maximum(total[data.obs], 1e-30)
    return coef, pred


def _slope_penalty(knots: Sequence[int]) -> FloatArray:
    """Rows ``delta_{l+1} / width_{l+1} - delta_l / width_l`` (a change of slope between
    consecutive knot intervals), scaled by the knot so that every batch range counts alike;
    acting on ``[tau_0, delta_1, ..]``."""
    k = np.asarray(knots, dtype=np.float64)
    m = len(knots)
    width = np.diff(k)
    rows = []
    for l in range(1, m - 1):  # noqa: E741 - the increment index of the docstring
        r = np.zeros(m)
        r[l] = -k[l] / width[l - 1]
        r[l + 1] = k[l] / width[l]
        rows.append(r)
    return np.array(rows).reshape(len(rows), m)


def _quality(data: _Data, knots: Sequence[int], pred: FloatArray, num_trimmed: int,
             cfg: FitSettings, overhead_s: float) -> FitQuality:
    steps = data.dur * data.tokens[data.obs] / data.time[data.obs]
    rel = (pred - data.time) / data.time
    rel_rmse = float(np.sqrt(np.mean(rel * rel)))
    k = np.asarray(knots, dtype=np.float64)
    nearest = np.abs(np.log2(np.maximum(data.batch, 1.0))[:, None] - np.log2(k)[None, :])
    per_knot = np.bincount(np.argmin(nearest, axis=1), steps, len(knots))
    levels = int(np.count_nonzero(per_knot > 0.02 * per_knot.sum()))
    n = len(data.tokens)
    reason = ""
    if n < cfg.min_observations:
        reason = f"{n} timed pieces, need {cfg.min_observations}"
    elif levels < cfg.min_batch_levels:
        reason = f"pieces ran at {levels} batch size(s), need {cfg.min_batch_levels}"
    elif rel_rmse > cfg.max_rel_rmse:
        reason = f"pieces predicted to {rel_rmse:.0%}, need {cfg.max_rel_rmse:.0%}"
    elif overhead_s > cfg.max_overhead_share * float(np.median(data.time)):
        reason = (f"a fixed {overhead_s:.3g} s per piece, over {cfg.max_overhead_share:.0%} of "
                  "the median piece: decode time not separated")
    return FitQuality(
        num_observations=n, num_trimmed=num_trimmed, num_tokens=int(data.tokens.sum()),
        batch_min=float(data.batch.min()), batch_max=float(data.batch.max()),
        batch_levels=levels, rel_rmse=rel_rmse,
        ready=not reason, reason=reason,
    )


def fit_prefill(observations: Sequence[PrefillObservation],
                settings: FitSettings | None = None) -> PrefillModel | None:
    """Seconds per prefilled token: the slope of time to first token over prompt tokens
    (non-negative least squares with an intercept for the fixed cost). None when there are
    too few observations or their prompt lengths vary less than 2x."""
    cfg = settings or FitSettings()
    if len(observations) < cfg.min_prefill_observations:
        return None
    p = np.array([o.prompt_tokens for o in observations], dtype=np.float64)
    t = np.array([o.ttft_s for o in observations], dtype=np.float64)
    if p.max() < 2 * p.min():
        return None
    coef = nnls(np.stack([np.ones_like(p), p], axis=1) / t[:, None], np.ones_like(t))
    return PrefillModel(float(coef[1])) if coef[1] > 0 else None
