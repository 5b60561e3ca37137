"""Each replica's own speed: how much slower (or faster) than the shared decode curve it runs.

The ``auto`` profile fits one curve ``tau(b) + k * C`` to the pieces of every replica. A fleet
that mixes GPU generations, a throttled GPU or a noisy neighbour runs some replicas slower
than the others; one curve hides that. Here each replica gets a *speed factor* ``s_r``: its
decode steps take ``s_r`` times the shared curve's (its prefill too: a slower GPU is slower at
both), fitted from its own timed pieces:

- a piece that generated ``g`` tokens over a window whose stretches lasted ``d_j`` at batch
  ``b_j`` and context ``C_j`` would have made ``sum_j d_j / (tau(b_j) + k C_j)`` steps on the
  shared curve (its fixed cost ``o`` taken off the window first); it made ``g``, so it ran
  ``s = predicted / g`` times slower;
- a replica's factor is the median of its pieces' ``log s`` less the typical piece's (the
  median over every replica's pieces), shrunk toward the typical piece by
  ``n / (n + prior_pieces)`` for ``n`` pieces: the typical piece is the prior until the
  replica has enough of its own observations. Shrinking toward the typical piece, not toward
  the curve itself, keeps a young curve's error out of the factors: a curve fitted on a few
  pieces of one batch size can be off by orders of magnitude, and shrunk toward it a slow
  replica with fewer pieces than the others came out faster than them;
- the factors are normalized so that their median over the replicas is 1 (the shared curve is
  the typical replica's; a uniform error of the curve is the curve's to fix, not a speed), and
  a fleet whose factors all lie within ``band`` of 1 is homogeneous (every factor 1), so that
  timing noise never perturbs the decisions on a uniform fleet.

``normalized`` divides each piece's times by its replica's factor, so the shared curve can be
refitted on a mixed fleet as if every replica ran at the typical speed. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from tailsieve.errors import ProfileError
from tailsieve.model.decode_observations import PieceObservation
from tailsieve.model.throughput import ThroughputModel

__all__ = ["fit_speeds", "normalized", "piece_slowness"]


def piece_slowness(o: PieceObservation, model: ThroughputModel, overhead_s: float = 0.0) -> float:
    """How many times slower than ``model`` the piece ``o`` ran (see the module docstring;
    ``overhead_s``: the fitted fixed cost per piece, at most half the piece's time is taken
    off)."""
    step = (model.tau_array(np.asarray(o.batch, dtype=np.float64))
            + model.context_s_per_token * np.asarray(o.context_tokens, dtype=np.float64))
    busy = 1.0 - min(max(overhead_s, 0.0) / o.duration_s, 0.5)
    predicted = busy * float(np.sum(np.asarray(o.durations_s) / np.maximum(step, 1e-12)))
    return predicted / o.tokens


def fit_speeds(observations: Iterable[PieceObservation], model: ThroughputModel,
               overhead_s: float = 0.0, prior_pieces: float = 4.0,
               band: float = 1.25) -> dict[str, float]:
    """Every observed replica's speed factor against ``model`` (see the module docstring),
    keyed by ``PieceObservation.replica``; all 1.0 where the fleet looks homogeneous."""
    if not (math.isfinite(prior_pieces) and prior_pieces >= 0):
        raise ProfileError(f"prior_pieces must be a finite number >= 0, got {prior_pieces!r}")
    if not (math.isfinite(band) and band >= 1):
        raise ProfileError(f"band must be a finite number >= 1, got {band!r}")
    logs: dict[str, list[float]] = {}
    for o in observations:
        s = piece_slowness(o, model, overhead_s)
        if s > 0 and math.isfinite(s):
            logs.setdefault(o.replica, []).append(math.log(s))
    if not logs:
        return {}
    own = {r: float(np.median(v)) for r, v in logs.items()}
    typical = float(np.median([x for v in logs.values() for x in v]))
    shrunk = {r: len(logs[r]) / (len(logs[r]) + prior_pieces) * (x - typical)
              for r, x in own.items()}
    mid = float(np.median(list(shrunk.values())))
    out = {r: math.exp(x - mid) for r, x in shrunk.items()}
    if all(abs(math.log(f)) < math.log(band) for f in out.values()):
        return dict.fromkeys(out, 1.0)
    return out


def normalized(observations: Sequence[PieceObservation],
               speeds: Mapping[str, float]) -> list[PieceObservation]:
    """``observations`` with each piece's times divided by its replica's factor (those of a
    replica without one unchanged)."""
    out = []
    for o in observations:
        f = speeds.get(o.replica, 1.0)
        if f == 1.0:
            out.append(o)
            continue
        out.append(replace(o, duration_s=o.duration_s / f,
                           durations_s=tuple(d / f for d in o.durations_s)))
    return out
