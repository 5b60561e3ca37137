"""One-shot baseline routings (docs/design.md, "Offline oracle", paper A.2), simulated as one step.

A baseline routes the step's N groups once, without cutoffs or candidates; the step ends when
the last replica finishes. Oracle policies read the realized lengths before routing (they are
the only code allowed to). Each routing is a per-request replica assignment (the four paper baselines come from
``tailsieve.policy``; the top-k oracle lives here), so Seer-style
routing may split a group across replicas; replicas listed as ``tail_replicas`` run the tail
pool's config (its speculative decoding), the others the bulk pool's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.core.outcome import GroupResult, StepOutcome
from tailsieve.core.pool import Pool
from tailsieve.errors import ConfigError
from tailsieve.model.replica_time import replica_run
from tailsieve.policy.colocate_tokens import ColocateTokensPolicy
from tailsieve.policy.registry import get_policy
from tailsieve.sim.replicas import PoolConfigs

IntArray = npt.NDArray[np.int64]

BASELINE_POLICIES: tuple[str, ...] = (
    "uniform", "uniform-requests", "uniform-oracle", "streamrl-oracle", "seer-oracle",
    "topk-oracle",
)
# accepted by name, not in the default comparison: llm-d's group co-location by tokens
EXTRA_BASELINES: tuple[str, ...] = ("colocate-tokens",)


@dataclass(frozen=True, slots=True)
class RequestRouting:
    """Replica of every request of a step; ``replica[g, j]`` = response j of group g."""

    replica: IntArray  # shape (N, n)
    tail_replicas: tuple[int, ...] = ()  # replicas running the tail pool's config
    q: int = 0  # groups isolated on the tail replicas (top-k oracle), else 0


def _pool_time(lens: IntArray, taus: npt.NDArray[np.float64], k: float = 0.0) -> float:
    """All-admit replica time with precomputed ``taus[b]`` and context coefficient ``k``
    (closed form, section 2)."""
    if lens.size == 0:
        return 0.0
    desc = np.sort(lens)[::-1].astype(np.float64)
    return float(np.dot(desc, np.diff(taus[: desc.size + 1])) + k * np.dot(desc, desc) / 2.0)


def route_topk_oracle(lens: IntArray, num_replicas: int, pools: PoolConfigs) -> RequestRouting:
    """Top-q groups by true total length round-robin on m tail replicas, the rest round-robin
    on R - m; the best static (q, m) over m in 1..R-1, q in 1..N-1."""
    num_groups, n = lens.shape
    if num_replicas < 2 or num_groups < 2:
        g0 = np.arange(num_groups, dtype=np.int64) % num_replicas
        return RequestRouting(np.repeat(g0[:, None], n, axis=1))
    rank = np.argsort(-lens.sum(axis=1), kind="stable")
    ranked = lens[rank]
    t_taus = pools.tail.throughput.taus(num_groups * n)
    b_taus = pools.bulk.throughput.taus(num_groups * n)
    t_k = pools.tail.throughput.context_s_per_token
    b_k = pools.bulk.throughput.context_s_per_token
    best = (np.inf, 0, 0)
    for m in range(1, num_replicas):
        nb = num_replicas - m
        for q in range(1, num_groups):
            t_tail = max(_pool_time(ranked[j:q:m].ravel(), t_taus, t_k) for j in range(min(m, q)))
            if t_tail >= best[0]:
                break  # the tail pool only gets slower as q grows
            t_bulk = max(_pool_time(ranked[q + j::nb].ravel(), b_taus, b_k) for j in range(nb))
            if max(t_tail, t_bulk) < best[0]:
                best = (max(t_tail, t_bulk), q, m)
    _, q, m = best
    nb = num_replicas - m
    g = np.empty(num_groups, dtype=np.int64)
    pos = np.arange(num_groups)
    g[rank[:q]] = nb + pos[:q] % m
    g[rank[q:]] = pos[: num_groups - q] % nb
    return RequestRouting(np.repeat(g[:, None], n, axis=1), tuple(range(nb, num_replicas)), q)


def route(name: str, lens: IntArray, num_replicas: int, pools: PoolConfigs,
          prompt_tokens: Sequence[int] | None = None) -> RequestRouting:
    """Route one step's groups (``lens``: shape (N, n)) with a baseline policy by name:
    ``topk-oracle`` here, the others from the policy registry (``tailsieve.policy``);
    ``prompt_tokens``: each group's prompt size (read by ``colocate-tokens`` only)."""
    if name == "topk-oracle":
        return route_topk_oracle(lens, num_replicas, pools)
    if name not in BASELINE_POLICIES + EXTRA_BASELINES:
        raise ConfigError(f"unknown baseline {name!r}; choose one of "
                          f"{', '.join(BASELINE_POLICIES + EXTRA_BASELINES)}")
    if name == "colocate-tokens":
        routing = ColocateTokensPolicy().route(list(lens), num_replicas, pools.bulk.throughput,
                                               prompt_tokens)
        return RequestRouting(np.stack(routing.replicas).astype(np.int64))
    routing = get_policy(name).route(list(lens), num_replicas, pools.bulk.throughput)
    return RequestRouting(np.stack(routing.replicas).astype(np.int64))


def run_baseline_step(
    step: int,
    prompt_ids: Sequence[str],
    lengths: Callable[[str, int], Sequence[int] | IntArray],
    routing_name: str,
    num_replicas: int,
    pools: PoolConfigs,
    prompt_tokens: Callable[[str], int] | None = None,
) -> tuple[StepOutcome, RequestRouting]:
    """Route and simulate one baseline step; every group is delivered, nothing aborted."""
    lens = np.array([np.asarray(lengths(p, step), dtype=np.int64) for p in prompt_ids])
    if lens.ndim != 2:
        raise ConfigError("every group of a step must have the same number of responses")
    ptoks = np.array([prompt_tokens(p) if prompt_tokens else 0 for p in prompt_ids])
    routing = route(routing_name, lens, num_replicas, pools,
                    ptoks.tolist() if prompt_tokens else None)
    done = np.zeros(lens.shape)
    busy = np.zeros(num_replicas)
    preempted = recomputed = 0
    by_replica = [0] * num_replicas
    for r in range(num_replicas):
        sel = routing.replica == r
        if not sel.any():
            continue
        cfg = pools.tail if r in routing.tail_replicas else pools.bulk
        pt = np.broadcast_to(ptoks[:, None], lens.shape)[sel].tolist()
        rr = replica_run(lens[sel], cfg, pt if prompt_tokens else None)
        done[sel] = rr.done_s
        preempted += rr.num_preemptions
        by_replica[r] = rr.num_preemptions
        recomputed += rr.recomputed_tokens
        busy[r] = float(done[sel].max())
    groups: list[GroupResult] = []
    tail_time = bulk_time = 0.0
    for g, pid in enumerate(prompt_ids):
        last = int(np.argmax(done[g]))
        rep = int(routing.replica[g, last])
        pool = Pool.TAIL if rep in routing.tail_replicas else Pool.BULK
        end = float(done[g].max())
        if pool is Pool.TAIL:
            tail_time = max(tail_time, end)
        else:
            bulk_time = max(bulk_time, end)
        groups.append(GroupResult(pid, pool, rep, end, tuple(int(x) for x in lens[g])))
    total = int(lens.sum())
    outcome = StepOutcome(
        step=step, delivered=tuple(groups), aborted=(), tail_time_s=tail_time,
        bulk_cut_s=bulk_time, makespan_s=max(tail_time, bulk_time), wasted_tokens=0,
        generated_tokens=total, replica_busy_s=tuple(float(b) for b in busy),
        num_preemptions=preempted, recomputed_tokens=recomputed,
        replica_preemptions=tuple(by_replica) if preempted else (),
    )
    return outcome, routing

