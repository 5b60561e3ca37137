"""Event-driven step simulation: one ``ReplicaEngine`` per replica, a global event loop.

Used when a running cap (FCFS queueing), a prefill cost or a KV capacity that can bind
(preemption) breaks the closed form. The loop
always advances the replica whose next completion is earliest, so it stops exactly at the
cutoff; then it aborts the unfinished fresh groups and drains what is left (pinned and tail
groups) replica by replica. Time moves from event to event, never token by token.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from tailsieve.model.replica_engine import Completion, ReplicaConfig, ReplicaEngine
from tailsieve.sim.layout import RequestLayout, SimResult, choose_fresh


def simulate_events(layout: RequestLayout, configs: Sequence[ReplicaConfig], k: int) -> SimResult:
    """Simulate one plan with the event engine; ``k`` fresh groups are delivered."""
    n = layout.group_size
    lens, ptoks = layout.lengths, layout.prompt_tokens
    engines = [ReplicaEngine(c) for c in configs]
    for r, idx in enumerate(layout.replica_requests):
        for i in idx.tolist():
            engines[r].submit(i, int(lens[i]), int(ptoks[i]))
    done = np.full(lens.size, np.inf)
    left = np.full(layout.num_groups, n, dtype=np.int64)
    group_done = np.full(layout.num_groups, np.inf)
    num_fresh_done = 0

    def record(comps: list[Completion]) -> int:
        fresh_done = 0
        for c in comps:
            i = int(c.request_id)  # type: ignore[call-overload]
            done[i] = c.time_s
            g = i // n
            left[g] -= 1
            if left[g] == 0:
                group_done[g] = c.time_s
                fresh_done += int(layout.fresh[g])
        return fresh_done

    if k > 0:
        heap = [(e.next_event_s(), r) for r, e in enumerate(engines) if e.has_work()]
        heapq.heapify(heap)
        cut_s = np.inf
        while heap and num_fresh_done < k:
            t, r = heapq.heappop(heap)
            if not np.isfinite(t):
                break
            num_fresh_done += record(engines[r].pop_next())
            cut_s = t
            if engines[r].has_work():
                heapq.heappush(heap, (engines[r].next_event_s(), r))
        if np.isfinite(cut_s):
            for e in engines:
                record(e.advance(max(cut_s, e.now_s)))
    chosen, cutoff = choose_fresh(group_done, layout, k)
    so_far = np.zeros(lens.size, dtype=np.int64)
    for g in np.flatnonzero(layout.fresh & ~chosen):
        for i in range(g * n, (g + 1) * n):
            r = int(layout.request_replica[i])
            if done[i] > cutoff:
                so_far[i] = engines[r].tokens_so_far(i)
                engines[r].abort(i)
                done[i] = np.inf
    for e in engines:
        while e.has_work():
            record(e.pop_next())
    return SimResult(
        done_s=done, tokens_so_far=so_far, delivered_fresh=chosen, cutoff_s=cutoff,
        num_preemptions=sum(e.num_preemptions for e in engines),
        recomputed_tokens=sum(e.recomputed_tokens for e in engines),
        replica_preemptions=tuple(e.num_preemptions for e in engines),
    )
