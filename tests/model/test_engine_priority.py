"""vLLM's priority scheduling policy in the event engine: the waiting queue by
``(priority, arrival)``, the running request of largest ``(priority, arrival)`` preempted."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.model.replica_engine import ReplicaConfig, ReplicaEngine
from tailsieve.model.throughput import ThroughputModel

HAND = ThroughputModel.from_pairs([(1, 5.02e-3), (64, 6.28e-3)], name="hand").with_context(55e-9)


@dataclass
class _Seq:
    rid: int
    prompt: int
    length: int
    priority: int
    done: int = 0


def brute_force(reqs: list[tuple[int, int, int]], cfg: ReplicaConfig) -> tuple[np.ndarray, int]:
    """Literal step-by-step decode under vLLM's priority policy: before every step the KV
    must hold the next token of every running request, else the running request of largest
    ``(priority, arrival)`` is preempted; waiting requests are admitted in
    ``(priority, arrival)`` order while the next step still fits (each on submit, too)."""
    model, cap, seqs_cap = cfg.throughput, cfg.kv_capacity_tokens, cfg.max_num_seqs
    waiting: list[_Seq] = []
    running: list[_Seq] = []
    out = np.zeros(len(reqs))
    t = stall = 0.0
    preemptions = 0

    def held() -> int:
        return sum(s.prompt + s.done for s in running) + len(running)

    def admit() -> None:
        nonlocal stall
        waiting.sort(key=lambda s: (s.priority, s.rid))
        while waiting and (seqs_cap is None or len(running) < seqs_cap):
            w = waiting[0]
            if running and cap is not None and held() + w.prompt + w.done + 1 > cap:
                break
            waiting.pop(0)
            stall += cfg.recompute_cost_s(w.prompt + w.done) if w.done else cfg.prefill_cost_s(
                w.prompt)
            running.append(w)

    for i, (n, p, q) in enumerate(reqs):  # submitted one by one, each admitted if it fits
        waiting.append(_Seq(i, p, n, q))
        admit()
    while running or waiting:
        while cap is not None and len(running) > 1 and held() > cap:
            victim = max(running, key=lambda s: (s.priority, s.rid))
            running.remove(victim)
            waiting.append(victim)
            preemptions += 1
            admit()
        t += stall
        stall = 0.0
        b = len(running)
        ctx = sum(s.prompt + s.done + 0.5 for s in running)
        t += model.tau(b) + model.context_s_per_token * ctx
        for s in running:
            s.done += 1
        for s in [s for s in running if s.done == s.length]:
            out[s.rid] = t
            running.remove(s)
        admit()
    return out, preemptions


def run_engine(reqs: list[tuple[int, int, int]], cfg: ReplicaConfig,
               priority: bool = True) -> tuple[np.ndarray, ReplicaEngine]:
    eng = ReplicaEngine(cfg, priority=priority)
    for i, (n, p, q) in enumerate(reqs):
        eng.submit(i, n, p, priority=q)
    out = np.zeros(len(reqs))
    while eng.has_work():
        for c in eng.pop_next():
            out[int(c.request_id)] = c.time_s  # type: ignore[call-overload]
    return out, eng


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 60), st.integers(0, 40), st.integers(-3, 3)), min_size=1,
             max_size=10),
    st.integers(0, 200),
    st.sampled_from([None, 2, 4]),
    st.sampled_from([0.0, 2e-5]),
)
def test_priority_policy_matches_brute_force(reqs: list[tuple[int, int, int]], slack: int,
                                             seqs_cap: int | None,
                                             prefill_per_token: float) -> None:
    cap = max(p + n for n, p, _ in reqs) + slack  # every request fits alone
    cfg = ReplicaConfig(HAND, max_num_seqs=seqs_cap, kv_capacity_tokens=cap,
                        prefill_s=1e-4 if prefill_per_token else 0.0,
                        prefill_s_per_token=prefill_per_token)
    want, preempt = brute_force(reqs, cfg)
    got, eng = run_engine(reqs, cfg)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert eng.num_preemptions == preempt


def test_high_priority_newcomer_is_admitted_first_and_never_preempted() -> None:
    # three requests of 200 tokens that do not fit together: under FCFS the first two run and
    # the last waits; under priority the last (priority -1) runs first and is never preempted
    cfg = ReplicaConfig(HAND, kv_capacity_tokens=450, max_num_seqs=1)
    reqs = [(200, 10, 0), (200, 10, 0), (200, 10, -1)]
    fcfs, _ = run_engine(reqs, cfg, priority=False)
    prio, _ = run_engine(reqs, cfg, priority=True)
    assert fcfs[2] > fcfs[0]
    # request 0 is admitted on submit (the queue was empty); when it ends, the urgent one
    # goes before request 1 although it arrived later
    assert prio[0] < prio[2] < prio[1]
    cfg = ReplicaConfig(HAND, kv_capacity_tokens=350)  # both admitted, both cannot finish
    fcfs, _ = run_engine([(200, 10, 1), (200, 10, 0)], cfg, priority=False)
    prio, eng = run_engine([(200, 10, 1), (200, 10, 0)], cfg)
    assert eng.num_preemptions >= 1
    assert fcfs[0] < fcfs[1]  # FCFS preempts the newest
    assert prio[1] < prio[0]  # the older but less urgent request is the one preempted


def test_equal_priorities_differ_from_fcfs_only_in_where_a_preempted_request_returns() -> None:
    cfg = ReplicaConfig(HAND, kv_capacity_tokens=2_000)
    reqs = [(100, 10 * i, 0) for i in range(1, 8)]
    fcfs, _ = run_engine(reqs, cfg, priority=False)
    prio, _ = run_engine(reqs, cfg, priority=True)
    # a preempted request keeps its arrival: with equal priorities it goes back before every
    # request that arrived after it, which is where FCFS puts it too (the front)
    assert prio == pytest.approx(fcfs, rel=1e-12)
