"""A token-by-token continuous-batching replica for the online-fit tests: requests arrive at
given times, every running request gains one token per decode step of ``tau(b) + k * C``
seconds, and each request's send and answer times go into a ``DecodeLedger`` exactly as the
router would see them (plus a fixed overhead and optional noise on the answer time)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tailsieve.model.decode_observations import DecodeLedger, PieceObservation


def lockstep_observation(tokens: int, duration_s: float, batch: float,
                         context_tokens: float = 0.0) -> PieceObservation:
    """A request that ran its whole window at one batch and context (a lockstep probe)."""
    return PieceObservation(tokens, duration_s, (duration_s,), (float(batch),),
                            (float(context_tokens),))


def run_replica(
    ledger: DecodeLedger,
    rng: np.random.Generator,
    tau: Callable[[int], float],
    k: float,
    num_requests: int = 64,
    overhead_s: float = 0.002,
    noise: float = 0.0,
    replica: str = "r0",
    t0: float = 0.0,
) -> float:
    """One step's worth of requests on one replica (half at ``t0``, the rest arriving over
    0.5 s; lognormal lengths, prompts of 50-400 tokens). Returns when the last one ended."""
    arrive = np.sort(rng.uniform(0.0, 0.5, num_requests))
    arrive[: num_requests // 2] = 0.0
    arrive += t0
    lengths = np.maximum(2, rng.lognormal(np.log(200), 0.8, num_requests).astype(int))
    prompts = rng.integers(50, 400, num_requests)
    gen = np.zeros(num_requests, dtype=int)
    started = np.zeros(num_requests, dtype=bool)
    done = np.zeros(num_requests, dtype=bool)
    ids: dict[int, int] = {}
    ends: dict[int, float] = {}
    t = t0
    while not done.all():
        for i in np.flatnonzero(~started & (arrive <= t)):
            started[i] = True
            ids[int(i)] = ledger.start(replica, float(arrive[i]), int(prompts[i]))
        run = started & ~done
        b = int(run.sum())
        if b == 0:
            t = float(arrive[~started].min())
            continue
        t += tau(b) + k * float((prompts[run] + gen[run]).sum())
        gen[run] += 1
        for i in np.flatnonzero(run & (gen >= lengths)):
            done[i] = True
            ends[int(i)] = t
    for i, end in ends.items():
        extra = overhead_s * (1.0 + noise * rng.standard_normal())
        ledger.end(ids[i], end + max(extra, 0.0), [int(lengths[i])], True)
    return max(ends.values())
