"""The fluid perfect-balance bound: a lower bound on a step's time under any placement, moves
included (at zero cost).

Setting: ``n`` responses of ``L_i`` tokens with prompts of ``P_i`` tokens, ``R`` identical
replicas of the decode model ``tau(b) + k * C`` per iteration (``C``: context held by the running
requests, prompt plus generated tokens). A placement may move any running response to any
replica at any moment for free, idle, queue or batch as it likes; prefills cost nothing.

Write ``n_s = #{i : L_i > s}`` for the responses that generate a token at *level* ``s`` (their
``s+1``-th token, ``s = 0 .. L_max - 1``) and ``g`` for the largest function of the form
``g(0) = 0, g(b) = tau(1) + slope * (b - 1)`` that lies under ``tau`` at every batch size
``1 .. n`` (``slope`` is the smallest chord slope of ``tau`` from ``b = 1``, capped at ``tau(1)``
so that ``g`` is concave). The bound is::

    T_fluid = max( max_i E_i(L_i),
                   max_x [ E(x) + (sum_{s >= x} g(n_s) + k sum_{s >= x} sum_{L_i > s} (P_i + s)) / R ] )

    E_i(x) = x tau(1) + k (P_i x + x (x - 1) / 2),   E(x) = min_{i : L_i > x} E_i(x)

Reading: no response can have generated ``x`` tokens before ``E(x)`` (every iteration that
carries it lasts at least ``tau(1)`` plus its own context read). Everything at levels ``>= x``
happens after that moment, spread over ``R`` replicas as a fluid in perfect balance; its cost is
at least the context reads it needs (fixed: ``k`` per context token per generated token, whatever
the placement) plus the iteration cost of running those levels in lockstep, one pooled iteration
of ``g(n_s)`` per level: for a concave ``g`` with ``g(0) = 0`` the lockstep family of
iterations (level by level, every response still running) majorizes any other family in which
response ``i`` appears in ``L_i - x`` iterations, so it is the cheapest (Karamata). ``x = 0`` is
the total work spread evenly; ``x`` near ``L_max`` is the longest response alone.

Why not "every replica at the same cost at every moment" taken literally (all replicas
iterating in lockstep with ``n_s / R`` responses each)? That charges every replica the fixed
iteration cost at every level, and a placement beats it whenever some replica finishes its work
in fewer, longer iterations (e.g. one long response alone on one replica, many one-token
responses with long prompts in a single iteration on another). The form above pays the fixed
cost once per level for the pool as a whole, which no placement can undercut. Levels are whole
tokens; the simulator's engine, whose context grows continuously, is at least as slow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.throughput import ThroughputModel


@dataclass(frozen=True, slots=True)
class FluidBound:
    """The bound and what attains it."""

    bound_s: float  # the fluid perfect-balance bound, seconds
    level: int  # the level x whose term attains it (-1: a response alone, max_i E_i(L_i))
    spread_s: float  # the x = 0 term: all work spread evenly over the replicas


def _lockstep_line(model: ThroughputModel, max_batch: int) -> tuple[float, float]:
    """``(tau(1), slope)`` of the concave minorant ``g`` of ``tau`` on ``1 .. max_batch``."""
    taus = model.taus(max(max_batch, 1))
    tau1 = float(taus[1])
    if max_batch < 2:
        return tau1, 0.0
    b = np.arange(2, max_batch + 1, dtype=np.float64)
    slope = float(np.min((taus[2:] - tau1) / (b - 1.0)))
    return tau1, min(max(slope, 0.0), tau1)


def fluid_bound(
    lengths: npt.ArrayLike,
    model: ThroughputModel,
    num_replicas: int,
    prompt_tokens: npt.ArrayLike | None = None,
) -> FluidBound:
    """The fluid perfect-balance bound of one step (see the module doc), seconds."""
    if num_replicas < 1:
        raise ConfigError(f"num_replicas must be >= 1, got {num_replicas}")
    lens = np.asarray(lengths, dtype=np.int64).ravel()
    prompts = (np.zeros(lens.shape, dtype=np.float64) if prompt_tokens is None
               else np.broadcast_to(np.asarray(prompt_tokens, dtype=np.float64), lens.shape))
    keep = lens > 0
    lens, prompts = lens[keep], prompts[keep]
    if lens.size == 0:
        return FluidBound(0.0, 0, 0.0)
    if np.any(prompts < 0):
        raise ConfigError("prompt tokens must be >= 0")
    k = model.context_s_per_token
    tau1, slope = _lockstep_line(model, int(lens.size))
    top = int(lens.max())
    levels = np.arange(top, dtype=np.float64)
    # n_s and the prompts of the responses still running at level s (difference arrays)
    count = np.zeros(top + 1)
    np.add.at(count, lens, 1.0)
    n_s = lens.size - np.cumsum(count)[:-1]
    ptot = np.zeros(top + 1)
    np.add.at(ptot, lens, prompts)
    p_s = prompts.sum() - np.cumsum(ptot)[:-1]
    g = np.where(n_s > 0, tau1 + slope * (n_s - 1.0), 0.0)
    per_level = g + k * (p_s + levels * n_s)
    suffix = np.cumsum(per_level[::-1])[::-1]
    # E(x): the smallest prompt among the responses with L_i > x (running suffix minimum)
    order = np.argsort(lens)
    pmin_by_len = np.minimum.accumulate(prompts[order][::-1])[::-1]
    first_longer = np.searchsorted(lens[order], levels, side="right")
    p_min = pmin_by_len[first_longer]
    earliest = levels * tau1 + k * (p_min * levels + levels * (levels - 1.0) / 2.0)
    terms = earliest + suffix / num_replicas
    alone_each = lens * tau1 + k * (prompts * lens + lens * (lens - 1.0) / 2.0)
    alone = float(alone_each.max())
    x = int(np.argmax(terms))
    best = float(terms[x])
    if alone >= best:
        return FluidBound(alone, -1, float(terms[0]))
    return FluidBound(best, x, float(terms[0]))


def fluid_bound_s(
    lengths: npt.ArrayLike,
    model: ThroughputModel,
    num_replicas: int,
    prompt_tokens: npt.ArrayLike | None = None,
) -> float:
    """``fluid_bound(...).bound_s``."""
    return fluid_bound(lengths, model, num_replicas, prompt_tokens).bound_s
