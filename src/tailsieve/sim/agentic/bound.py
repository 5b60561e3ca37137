"""A lower bound on one agentic step's time that no router can beat (pure).

It holds for every placement of turns, every move (at a boundary or mid-turn, verl's
abort-all rebalance included) and every cache outcome of the simulator's step
(``sim.agentic.step``), which starts every first turn at time 0 on empty prefix caches, and
whose trajectories of one group (one ``prompt_id``) share their prompt (checked). Two facts of the replica model (``model.replica_engine``) carry
it:

- **A trajectory's own path.** Turn ``t`` of a trajectory waits at least for its own prefill:
  the prompt at turn 0 (no cache holds anything yet; a sibling's prefill of the shared prompt
  stalls the replica they share as long), afterwards at least the tool's new
  tokens ``T_{t-1}`` (the most a cache can hold is the previous turn's context and output).
  It then decodes ``O_t`` tokens no faster than alone: a decode iteration at batch ``b``
  holding ``C`` context tokens takes ``tau(b) + k C >= tau_min + k c`` for a request of
  context ``c``, so the turn takes at least ``O tau_min + k (O C_t + O^2 / 2)`` (the engine's
  continuous progress). Then its tool runs ``D_t`` seconds. The sum over turns is the
  trajectory's *critical path*; the step lasts at least its longest.
- **Replica time.** A replica either stalls on a prefill, decodes, or idles, one at a time,
  so the work done after time ``s`` needs ``R (T - s)`` replica-seconds at most. A decode
  iteration of ``b`` requests holding ``C <= K`` tokens (``K``: the KV budget) costs
  ``tau(b) + k C >= a + s b + k C`` for every line ``a + s b`` under ``tau`` at the batch
  sizes the replica can run (``a >= 0``), hence at least ``sum_j (a c_j / K + s + k c_j)``
  over its requests: a token at context ``c`` costs at least ``h(c) = a c / K + s + k c``
  replica-seconds. With ``a = 0`` this is the peak-throughput bound ``1 / max_b (b / tau(b))``;
  with a KV budget, long contexts (few fit at once, so batches stay small) cost far more.
  The work of a trajectory that must happen after time ``s`` is at least the work of its
  critical path beyond position ``s`` (no request runs ahead of its own path; a group's
  shared prompt is prefilled once, by its first trajectory, since a replica's cache holds it
  for the siblings sent after), so
  ``T >= s + W_after(s) / R`` for every ``s``; at ``s = 0`` it is the total work.

The bound is the largest of the critical paths and of ``s + W_after(s) / R`` over a grid of
``s`` and over the vertices of the lines under ``tau``. Preemptions, recomputes, re-prefills
after evictions or moves, seams and queueing only add to a real step. Heterogeneous replicas
are bounded by their fastest (the least ``tau``, ``k`` and prefill cost, the largest KV
budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.workload.turns import Trajectory

__all__ = ["StepBound", "step_lower_bound"]

FloatArray = npt.NDArray[np.float64]
_GRID = 512  # positions s at which s + W_after(s) / R is evaluated
_CHUNK = 32  # grid positions per vectorized pass (memory: segments x chunk floats)


@dataclass(frozen=True, slots=True)
class StepBound:
    """A step's lower bound and its parts (seconds)."""

    bound_s: float  # max of the three below
    critical_path_s: float  # the longest trajectory's own path
    work_s: float  # all the step's work over the replicas (the tail bound at s = 0)
    tail_s: float  # max over s of s + (work after s) / R

    def __post_init__(self) -> None:
        if not all(np.isfinite(x) and x >= 0 for x in (self.bound_s, self.critical_path_s,
                                                       self.work_s, self.tail_s)):
            raise ConfigError("a step bound must be finite and >= 0")


@dataclass(frozen=True, slots=True)
class _Fastest:
    """The fastest replica's numbers (an envelope over heterogeneous configs)."""

    tau_min: float  # least tau(b) over b >= 1, s
    k: float  # context seconds per token per iteration
    kv: float  # KV budget, tokens (inf: none)
    lines: FloatArray  # (n, 2): (a, s) of the candidate lines a + s b under tau
    configs: tuple[ReplicaConfig, ...]

    def prefill_s(self, tokens: FloatArray, start: FloatArray) -> FloatArray:
        """Least stall to prefill ``tokens`` at positions ``start ..``, over the replicas and
        over a first prefill and a recompute (a continuation's)."""
        n = np.maximum(tokens, 0.0)
        end = start + n
        pairs = (end * (end - 1.0) - start * (start - 1.0)) / 2.0
        costs = []
        for c in self.configs:
            per = c.prefill_s_per_token if c.recompute_s_per_token is None else min(
                c.prefill_s_per_token, c.recompute_s_per_token)
            pair = c.prefill_s_per_token_pair if c.recompute_s_per_token_pair is None else min(
                c.prefill_s_per_token_pair, c.recompute_s_per_token_pair)
            costs.append(c.prefill_s + per * n + pair * pairs)
        return np.asarray(np.min(costs, axis=0), dtype=np.float64)


def _lower_hull(b: FloatArray, t: FloatArray) -> list[int]:
    """Indices of the lower convex hull of the points (b, t), b increasing."""
    hull: list[int] = []
    for i in range(b.size):
        while len(hull) >= 2:
            i0, i1 = hull[-2], hull[-1]
            cross = (b[i1] - b[i0]) * (t[i] - t[i0]) - (t[i1] - t[i0]) * (b[i] - b[i0])
            if cross > 0:
                break
            hull.pop()
        hull.append(i)
    return hull


def _fastest(configs: Sequence[ReplicaConfig], num_requests: int) -> _Fastest:
    if not configs:
        raise ConfigError("a step bound needs at least one replica")
    caps = [c.max_num_seqs for c in configs]
    top = max(1, num_requests if any(c is None for c in caps)
              else min(num_requests, max(c for c in caps if c is not None)))
    taus = np.min([c.throughput.taus(top)[1:] for c in configs], axis=0)
    b = np.arange(1, top + 1, dtype=np.float64)
    kvs = [c.kv_capacity_tokens for c in configs]
    kv = np.inf if any(x is None for x in kvs) else float(max(x for x in kvs if x is not None))
    lines = [(0.0, float(np.min(taus / b)))]  # through the origin: peak throughput
    if np.isfinite(kv):
        hull = _lower_hull(b, taus)
        for i0, i1 in pairwise(hull):
            slope = (taus[i1] - taus[i0]) / (b[i1] - b[i0])
            a = taus[i0] - slope * b[i0]
            if a >= 0:  # a line through two consecutive hull points: a vertex of the
                lines.append((float(a), float(slope)))  # feasible (a, s) region
    k = min(c.throughput.context_s_per_token for c in configs)
    return _Fastest(float(np.min(taus)), k, kv, np.array(lines, dtype=np.float64),
                    tuple(configs))


@dataclass(frozen=True, slots=True)
class _Segments:
    """Every prefill and decode segment of every trajectory's critical path."""

    start_s: FloatArray  # position on its trajectory's path where it begins
    dur_s: FloatArray  # its length there
    decode: npt.NDArray[np.bool_]  # a decode segment (else a prefill)
    context: FloatArray  # decode: the turn's context at its start, tokens
    tokens: FloatArray  # decode: the turn's output tokens
    work: FloatArray  # prefill: the share of it that is replica work (0: a sibling's
    # shared prompt, counted once for its group)


def _paths(trajs: Sequence[Trajectory], fast: _Fastest) -> tuple[FloatArray, _Segments]:
    """Each trajectory's critical path (seconds) and its segments."""
    pre_tok: list[float] = []
    pre_at: list[float] = []
    ctx_l: list[float] = []
    out_l: list[float] = []
    tools: list[float] = []
    owner: list[int] = []
    shared: list[float] = []
    seen: set[object] = set()
    for i, tr in enumerate(trajs):
        ctx = float(tr.prompt_tokens)
        for t, u in enumerate(tr.turns):
            new = ctx if t == 0 else float(tr.turns[t - 1].tool_output_tokens)
            shared.append(0.0 if t == 0 and tr.prompt_id in seen else 1.0)
            seen.add(tr.prompt_id)
            pre_tok.append(new)
            pre_at.append(ctx - new)
            ctx_l.append(ctx)
            out_l.append(float(u.output_tokens))
            tools.append(u.tool_s if t + 1 < tr.num_turns else 0.0)
            owner.append(i)
            ctx += u.output_tokens + u.tool_output_tokens
    pre = fast.prefill_s(np.array(pre_tok), np.array(pre_at))
    c, o = np.array(ctx_l), np.array(out_l)
    dec = o * fast.tau_min + fast.k * (o * c + o * o / 2.0)
    # per turn: prefill, decode, tool; positions are the running sum within a trajectory
    steps = np.stack([pre, dec, np.array(tools)], axis=1).ravel()
    who = np.repeat(np.array(owner), 3)
    ends = np.cumsum(steps)
    first = np.searchsorted(who, np.arange(len(trajs)))
    base = np.where(first > 0, ends[np.maximum(first - 1, 0)], 0.0)
    starts = ends - steps - base[who]
    paths = np.zeros(len(trajs))
    np.maximum.at(paths, who, ends - base[who])
    kind = np.tile(np.array([0, 1, 2]), len(owner))
    keep = kind < 2
    return paths, _Segments(starts[keep], steps[keep], kind[keep] == 1,
                            np.repeat(c, 2), np.repeat(o, 2), np.repeat(np.array(shared), 2))


def _remaining(seg: _Segments, fast: _Fastest,
               s: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """At each position ``s``: the prefill seconds, the decode context integral (token x
    context) and the decode tokens of every path beyond ``s``."""
    e = np.clip(s[:, None] - seg.start_s[None, :], 0.0, seg.dur_s[None, :])
    pre = np.where(seg.decode, 0.0, (seg.dur_s - e) * seg.work).sum(axis=1)
    c, o = seg.context, seg.tokens
    base = fast.tau_min + fast.k * c
    x = np.minimum(2.0 * e / (base + np.sqrt(base * base + 2.0 * fast.k * e)), o)
    q = np.where(seg.decode, (o * c + o * o / 2.0) - (x * c + x * x / 2.0), 0.0).sum(axis=1)
    n = np.where(seg.decode, o - x, 0.0).sum(axis=1)
    return pre, q, n


def step_lower_bound(trajectories: Sequence[Trajectory], configs: Sequence[ReplicaConfig],
                     grid: int = _GRID) -> StepBound:
    """The least time any router can take for one step of ``trajectories`` on replicas
    ``configs`` in the simulator (see the module docstring)."""
    if not trajectories:
        raise ConfigError("a step bound needs at least one trajectory")
    if grid < 1:
        raise ConfigError(f"grid must be >= 1, got {grid}")
    prompts: dict[object, int] = {}
    for tr in trajectories:
        if prompts.setdefault(tr.prompt_id, tr.prompt_tokens) != tr.prompt_tokens:
            raise ConfigError(f"group {tr.prompt_id!r}: its trajectories must share their "
                              f"prompt ({prompts[tr.prompt_id]} != {tr.prompt_tokens} tokens)")
    fast = _fastest(configs, len(trajectories))
    paths, seg = _paths(trajectories, fast)
    crit = float(paths.max())
    r = float(len(configs))
    kv = fast.kv if np.isfinite(fast.kv) else np.inf
    per_q = fast.lines[:, 0] / kv + fast.k  # seconds per (token x context) of each line
    per_n = fast.lines[:, 1]  # seconds per token of each line
    positions = np.linspace(0.0, crit, grid)
    tail, work = 0.0, 0.0
    for lo in range(0, grid, _CHUNK):
        s = positions[lo:lo + _CHUNK]
        pre, q, n = _remaining(seg, fast, s)
        w = pre[:, None] + q[:, None] * per_q[None, :] + n[:, None] * per_n[None, :]
        best = w.max(axis=1)
        if lo == 0:
            work = float(best[0]) / r
        tail = max(tail, float(np.max(s + best / r)))
    return StepBound(max(crit, tail, work), crit, work, tail)
