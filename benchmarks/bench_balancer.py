"""The balancer (moves by continuation) against per-request round-robin, paired, over seeds.

Run: ``PYTHONPATH=src python benchmarks/bench_balancer.py --out benchmarks/results/balancer``
(``--seeds 5 --steps 20`` by default; ``--cases NAME ...`` runs a subset; ``--no-gate``: every
m = 0 step balanced, no balance gate; ``--quick``: 2 seeds, 12 steps;
``--timing-only``: only the re-balance timings: each decision of a check, at most
``BalanceSettings.max_moves_per_decision`` moves, and each whole check, wall and CPU time).
Writes ``balancer.json`` and ``balancer.md`` into ``--out``.

Every case runs ``uniform-requests`` (what a per-request load balancer already does) and
``tailsieve`` (its controller in balance mode: the same dealing plus moves while the step
runs, ``core.balancer``) on the same prompts and lengths (the simulator's paired lengths), the
profile's context term, KV capacity and running cap on. Speedup = mean over steady steps
(index >= 5, as ``tailsieve simulate``'s paired column) of ``T_uniform-requests(t) /
T_tailsieve(t)``, per seed; then the mean over seeds with a 95% Student-t interval. Beside it:
moves per step, moved tokens per step, destination prefill seconds per step and the wasted
token fraction. Cases: the issue's three targets (4B paper-math R = 8, 4B AIME trace R = 8,
30B-A3B TP2 R = 4 with Uniform Oracle beside it) and the guards (weak tail, prefill priced at
4x the derived cost, i.e. a quarter of the derived prefill rate, MTP depth 3 on every replica
with the simulator's default acceptance rates (defaults, not measurements), and every other
shipped profile).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from outdir import default_out

from tailsieve.control.factory import make_controller
from tailsieve.core.balancer import BalanceSettings, ReplicaLoad
from tailsieve.core.controller import Controller
from tailsieve.core.running_index import RunningIndex
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.speculative import SpecConfig
from tailsieve.runtime.step.rebalancer import LiveRebalancer
from tailsieve.sim import movepath
from tailsieve.sim.driver import (
    ControllerFactory,
    SimSettings,
    default_controller,
    epoch_prompt_ids,
    run_policies,
)
from tailsieve.sim.movepath import PieceSettings
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.speedup_stats import STEADY_FROM, seed_speedup, t_interval
from tailsieve.sim.workloads import resolve_workload


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    profile: str
    workload: str
    replicas: int
    target: float  # speedup over uniform-requests the issue asks for (guards: 0.99)
    tail_strength: str | None = None
    prefill_scale: float = 1.0  # multiplies the derived per-token prefill (recompute) cost
    oracle: bool = False  # also run uniform-oracle (paired over uniform-requests)
    spec: str = "none"  # speculative decoding on every replica (acceptance: defaults)
    kv_scale: float = 1.0  # multiplies the profile's KV capacity (below 1: KV-bound)


CASES: tuple[Case, ...] = (
    Case("4b-paper-math-r8", "qwen3-4b-h100", "paper-math", 8, 1.10),
    Case("4b-aime-r8", "qwen3-4b-h100", "aime", 8, 1.04),
    Case("30b-a3b-paper-math-r4", "qwen3-30b-a3b-h100-tp2", "paper-math", 4, 1.07, oracle=True),
    Case("4b-paper-math-weak-tail", "qwen3-4b-h100", "paper-math", 8, 0.99, tail_strength="weak"),
    Case("4b-paper-math-prefill-x4", "qwen3-4b-h100", "paper-math", 8, 0.99, prefill_scale=4.0),
    Case("4b-aime-prefill-x4", "qwen3-4b-h100", "aime", 8, 0.99, prefill_scale=4.0),
    Case("30b-a3b-prefill-x4", "qwen3-30b-a3b-h100-tp2", "paper-math", 4, 0.99,
         prefill_scale=4.0),
    Case("4b-paper-math-mtp3", "qwen3-4b-h100", "paper-math", 8, 0.99, spec="mtp:3"),
    Case("4b-h200-paper-math", "qwen3-4b-h200", "paper-math", 8, 0.99),
    Case("qwen3.5-4b-paper-math", "qwen3.5-4b-h100", "paper-math", 8, 0.99),
    Case("qwen3.5-35b-a3b-paper-math-r4", "qwen3.5-35b-a3b-h100-tp2", "paper-math", 4, 0.99),
    Case("cpu-paper-math", "cpu", "paper-math", 8, 0.99),
    Case("illustrative-flat-paper-math", "illustrative-flat", "paper-math", 8, 0.99),
)


def pools_for(case: Case) -> PoolConfigs:
    base = ReplicaConfig.from_profile(load_profile(case.profile))
    if case.prefill_scale != 1.0:
        per = base.recompute_s_per_token or 0.0
        base = dataclasses.replace(base, recompute_s_per_token=per * case.prefill_scale)
    if case.kv_scale != 1.0 and base.kv_capacity_tokens is not None:
        base = dataclasses.replace(
            base, kv_capacity_tokens=int(base.kv_capacity_tokens * case.kv_scale))
    spec = SpecConfig.parse(case.spec)
    return PoolConfigs.from_specs(base, spec, spec)


PER_DECISION = BalanceSettings(interval_s=1.0, horizon_s=1.0).max_moves_per_decision  # default


class _TimedChecks:
    """Wraps the simulator's ``replica_loads``, ``plan_check`` and ``drain_decisions`` (the
    drain's LPT moves, ``core.drain_plan``) to time every decision of every re-balance check
    of a run (``check_s``): a check's first decision from building the
    loads to its moves (the planner's set-up included), each next one from asking for it to
    its moves; and each whole check (``whole_s``: its decisions summed). Beside the wall time,
    the thread's CPU time (``cpu_s``): what a decision costs when other jobs preempt it."""

    def __init__(self) -> None:
        self.check_s: list[float] = []  # per decision
        self.cpu_s: list[float] = []  # per decision, CPU time
        self.moves: list[int] = []  # moves per decision
        self.whole_s: list[float] = []  # per check: the sum of its decisions
        self.inner_loads = movepath.replica_loads
        self.inner_check = movepath.plan_check
        self.inner_drain = movepath.drain_decisions
        self._t_start = self._cpu_start = 0.0

    def start(self) -> None:
        """A check starts (its loads are built from here)."""
        self._t_start = time.perf_counter()
        self._cpu_start = time.thread_time()

    def loads(self, *args: Any, **kw: Any) -> Any:
        self.start()
        return self.inner_loads(*args, **kw)

    def check(self, *args: Any, **kw: Any) -> Iterator[list[Any]]:
        return self._timed(self.inner_check(*args, **kw))

    def drain(self, *args: Any, **kw: Any) -> Iterator[list[Any]]:
        return self._timed(self.inner_drain(*args, **kw))

    def _timed(self, decisions: Iterator[list[Any]]) -> Iterator[list[Any]]:
        self.whole_s.append(0.0)
        t0, c0 = self._t_start, self._cpu_start
        while True:
            try:
                decision = next(decisions)
            except StopIteration:
                return
            took = time.perf_counter() - t0
            self.cpu_s.append(time.thread_time() - c0)
            self.check_s.append(took)
            self.whole_s[-1] += took
            self.moves.append(len(decision))
            yield decision
            t0, c0 = time.perf_counter(), time.thread_time()

    def __enter__(self) -> _TimedChecks:
        movepath.replica_loads = self.loads  # type: ignore[assignment]
        movepath.plan_check = self.check  # type: ignore[assignment]
        movepath.drain_decisions = self.drain  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        movepath.replica_loads = self.inner_loads  # type: ignore[assignment]
        movepath.plan_check = self.inner_check  # type: ignore[assignment]
        movepath.drain_decisions = self.inner_drain  # type: ignore[assignment]

    def summary(self) -> dict[str, float]:
        """p50/p99/max of a decision (wall time; p50/p99 of its CPU time beside) and p50/p99
        of a whole check, ms."""
        ms = np.array(self.check_s or [0.0]) * 1e3
        cpu = np.array(self.cpu_s or [0.0]) * 1e3
        whole = np.array(self.whole_s or [0.0]) * 1e3
        return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
                "max_ms": float(ms.max()), "cpu_p50_ms": float(np.percentile(cpu, 50)),
                "cpu_p99_ms": float(np.percentile(cpu, 99)),
                "check_p50_ms": float(np.percentile(whole, 50)),
                "check_p99_ms": float(np.percentile(whole, 99)),
                "max_moves_in_a_decision": int(max(self.moves, default=0))}


def controllers(gate: bool) -> ControllerFactory:
    """The simulator's controllers, with the balance gate (default) or without it."""
    if gate:
        return default_controller

    def ungated(name: str, settings: SimSettings, pools: PoolConfigs) -> Controller:
        cfg = dataclasses.replace(settings.controller_config(), gate=None)
        return make_controller(name, cfg, pools.tail.throughput, pools.bulk.throughput)

    return ungated


def run_case(case: Case, seeds: list[int], steps: int, groups: int,
             pieces: PieceSettings | None = None, gate: bool = True) -> dict[str, Any]:
    pools = pools_for(case)
    timed = _TimedChecks()
    names = ["uniform-requests", "tailsieve", *(("uniform-oracle",) if case.oracle else ())]
    per_seed: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with timed:
        for sd in seeds:
            wl = resolve_workload(case.workload, case.tail_strength, seed=sd)
            dataset = wl.prompt_ids()
            settings = SimSettings(num_replicas=case.replicas, num_groups=groups, group_size=8,
                                   num_steps=steps, seed=sd, pieces=pieces)
            runs = run_policies(names, settings, lambda ds=dataset, s=sd: epoch_prompt_ids(ds, s),
                                wl, pools, controllers(gate))
            ur, ts = runs["uniform-requests"].run, runs["tailsieve"].run
            steady = [r for r in ts.regular if r.step >= STEADY_FROM]
            row: dict[str, Any] = {
                "seed": sd,
                "speedup": seed_speedup(ur, ts),
                "uniform_requests_step_s": float(np.mean([r.makespan_s for r in ur.regular
                                                          if r.step >= STEADY_FROM])),
                "tailsieve_step_s": float(np.mean([r.makespan_s for r in steady])),
                "moves_per_step": float(np.mean([r.diagnostics.num_moves for r in steady
                                                 if r.diagnostics])),
                "moved_tokens_per_step": float(np.mean([r.diagnostics.moved_tokens for r in steady
                                                        if r.diagnostics])),
                "prefill_s_per_step": float(np.mean([r.diagnostics.prefill_s for r in steady
                                                     if r.diagnostics])),
                "wasted_token_fraction": ts.wasted_token_fraction,
                "m_trajectory": ts.m_trajectory,
            }
            if case.oracle:
                row["uniform_oracle_speedup"] = seed_speedup(ur, runs["uniform-oracle"].run)
            per_seed.append(row)
    times = timed.summary()
    mean, lo, hi = t_interval([r["speedup"] for r in per_seed])
    out: dict[str, Any] = {
        **dataclasses.asdict(case), "seeds": seeds, "steps": steps, "groups": groups,
        "pieces": None if pieces is None else dataclasses.asdict(pieces),
        "balance_gate": gate,
        "speedup_mean": mean, "speedup_ci": [lo, hi],
        "min_seed_speedup": min(r["speedup"] for r in per_seed),
        "meets_target": mean >= case.target,
        "wasted_token_fraction_max": max(r["wasted_token_fraction"] for r in per_seed),
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "checks": len(timed.whole_s), "decisions": len(timed.check_s),
        # a decision: building the loads or settling the last decision's moves + plan_moves
        "decision_ms_p50": times["p50_ms"],
        "decision_ms_p99": times["p99_ms"],
        "decision_cpu_ms_p99": times["cpu_p99_ms"],  # its CPU time (no preemption counted)
        "check_ms_p99": times["check_p99_ms"],  # a whole check: its decisions summed
        "per_seed": per_seed,
    }
    for key in ("moves_per_step", "moved_tokens_per_step", "prefill_s_per_step",
                "uniform_requests_step_s", "tailsieve_step_s"):
        out[key] = float(np.mean([r[key] for r in per_seed]))
    if case.oracle:
        out["uniform_oracle_speedup_mean"] = float(np.mean(
            [r["uniform_oracle_speedup"] for r in per_seed]))
    return out


def decision_timing(num_replicas: int = 64, per_replica: int = 64, calls: int = 300,
                    seed: int = 0, max_moves: int = 64,
                    per_decision: int = PER_DECISION) -> dict[str, Any]:
    """Wall time of each decision of a re-balance check (building the ``ReplicaLoad`` list
    from each replica's running responses or settling the previous decision's moves, then
    ``plan_moves`` for at most ``per_decision`` moves) at ``num_replicas`` x ``per_replica``
    responses in flight, contexts drawn from 0-16k tokens with a random load skew per replica
    (a worst case: every check makes its ``max_moves`` allowed moves), on the 4B profile's
    cost model; and of the whole check (its decisions summed)."""
    cfg = ReplicaConfig.from_profile(load_profile("qwen3-4b-h100"))
    taus = cfg.throughput.taus(num_replicas * per_replica + 2).tolist()
    k = cfg.throughput.context_s_per_token
    per_token = cfg.recompute_s_per_token or 0.0
    rng = np.random.default_rng(seed)
    with _TimedChecks() as timed:
        moves = []
        for _ in range(calls):
            running = []
            for r in range(num_replicas):
                b = int(rng.integers(per_replica // 2, per_replica + 1))
                ctx = (rng.integers(0, 16_000, b) * rng.uniform(0.5, 1.0)).astype(int).tolist()
                running.append([((r, j), c) for j, c in enumerate(ctx)])
            timed.start()
            loads = [ReplicaLoad.of(r, items, taus.__getitem__, k, per_token)
                     for r, items in enumerate(running)]
            moves.append(sum(len(d) for d in timed.check(
                loads, 200.0, 0.05, max_moves, per_decision)))
    return {"num_replicas": num_replicas, "in_flight": num_replicas * per_replica,
            "calls": calls, "max_moves": max_moves, "max_moves_per_decision": per_decision,
            "decisions": len(timed.check_s), **timed.summary(),
            "mean_moves": float(np.mean(moves))}


def live_check_timing(num_replicas: int = 64, per_replica: int = 64, checks: int = 300,
                      seed: int = 0, collector: bool = True) -> dict[str, Any]:
    """CPU time of the live router's checks (``LiveRebalancer.check``: reading the executor's
    running index, then each decision planning and making its moves; ``MoveTally``) at
    ``num_replicas`` x ``per_replica`` unstreamed responses in flight, away from the emulated
    replicas that share the machine in ``bench_router``. Between two checks (2 s of step
    time apart) a random 2% of the responses complete and as many start on random replicas
    (contexts 0-16k tokens, random skew), so that imbalance re-forms; the 4B profile's cost
    model. ``collector=False``: the cyclic garbage collector is paused meanwhile (its pauses
    otherwise land in whichever decision allocates when one is due)."""
    cfg = ReplicaConfig.from_profile(load_profile("qwen3-4b-h100"))
    rng = np.random.default_rng(seed)
    idx = RunningIndex()
    now = [0.0]
    made: list[int] = []

    class _Mover:  # the executor's side: a move changes where the response counts
        def running_index(self) -> RunningIndex:
            return idx

        def running_responses(self) -> list[Any]:
            return []

        def move(self, prompt_id: str, sample: int, to_replica: int) -> bool:
            key = (prompt_id, sample)  # as on SGLang: the piece is aborted, its tokens kept
            e = idx.get(key)
            assert e is not None
            got = rb.progress.piece_tokens(e.on, e.start_s, now[0], e.cap)
            idx.piece_ended(key, e.known + got, e.prompt_tokens)
            idx.set_replica(key, to_replica)
            idx.piece_started(key, None, to_replica, now[0], 32_768)
            return True

    def start(n: int) -> None:
        for _ in range(n):
            key = (f"g{len(made)}", int(rng.integers(1 << 30)))
            r = int(rng.integers(num_replicas))
            made.append(0)
            idx.add(key, r, int(rng.integers(0, 16_000) * rng.uniform(0.5, 1.0)), 200, (r,))
            idx.piece_started(key, None, r, now[0], 32_768)

    start(num_replicas * per_replica)
    rb = LiveRebalancer(_Mover(), BalanceSettings(interval_s=2.0, horizon_s=100.0, seam_s=0.05,
                                                 expected_step_s=116.0),
                        [cfg] * num_replicas, lambda: [True] * num_replicas, lambda: now[0])
    if not collector:
        gc.disable()
    try:
        for _ in range(checks):
            now[0] += 2.0
            done = list(idx.entries)
            for i in rng.choice(len(done), len(done) // 50, replace=False):
                idx.remove(done[int(i)])
            start(len(done) // 50)
            rb.check()
    finally:
        gc.enable()
    dec = np.array(rb.tally.decision_cpu_s) * 1e3
    loads = np.array(rb.tally.loads_cpu_s) * 1e3
    whole = np.array(rb.tally.check_cpu_s) * 1e3
    return {"num_replicas": num_replicas, "in_flight": num_replicas * per_replica,
            "collector": collector, "checks": checks, "decisions": len(dec),
            "moves": rb.tally.num_moves,
            "cpu_p50_ms": float(np.percentile(dec, 50)), "cpu_p99_ms": float(np.percentile(dec, 99)),
            "cpu_max_ms": float(dec.max()), "loads_cpu_p50_ms": float(np.percentile(loads, 50)),
            "loads_cpu_p99_ms": float(np.percentile(loads, 99)),
            "check_cpu_p50_ms": float(np.percentile(whole, 50)),
            "check_cpu_p99_ms": float(np.percentile(whole, 99))}


def scale_timing(steps: int = 3, replicas: int = 64, groups: int = 512) -> dict[str, Any]:
    """Check times (building the loads + ``plan_moves``) inside a simulated run at
    ``replicas`` x ``groups * 8`` in flight (the ``tailsieve`` policy alone, 4B profile,
    paper-math)."""
    pools = pools_for(Case("scale", "qwen3-4b-h100", "paper-math", replicas, 0.99))
    wl = resolve_workload("paper-math", seed=0, num_prompts=4000)
    ds = wl.prompt_ids()
    settings = SimSettings(num_replicas=replicas, num_groups=groups, group_size=8,
                           num_steps=steps, seed=0)
    with _TimedChecks() as timed:
        run = run_policies(["tailsieve"], settings, lambda: epoch_prompt_ids(ds, 0), wl,
                           pools)["tailsieve"].run
    return {"replicas": replicas, "in_flight": groups * 8, "steps": steps,
            "checks": len(timed.whole_s), "decisions": len(timed.check_s),
            "max_moves_per_decision": PER_DECISION, **timed.summary(),
            "moves_per_step": run.moves_per_step}


def to_markdown(rows: list[dict[str, Any]]) -> str:
    head = ("| case | profile | R | tailsieve over uniform-requests (95% CI) | target | "
            "moves/step | moved tokens/step | prefill s/step | wasted | uniform-oracle | "
            "decision p99 ms (wall / CPU) |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        lo, hi = r["speedup_ci"]
        ci = "" if lo is None else f" ({lo:.3f}-{hi:.3f})"
        orc = r.get("uniform_oracle_speedup_mean")
        lines.append(
            f"| {r['name']} | {r['profile']} | {r['replicas']} | {r['speedup_mean']:.3f}x{ci} | "
            f"{'>=' if r['target'] > 1 else 'never below '}{r['target']:.2f}x | "
            f"{r['moves_per_step']:.0f} | {r['moved_tokens_per_step']:,.0f} | "
            f"{r['prefill_s_per_step']:.1f} | {100 * r['wasted_token_fraction_max']:.2f}% | "
            f"{'-' if orc is None else f'{orc:.3f}x'} | {r['decision_ms_p99']:.2f} / "
            f"{r['decision_cpu_ms_p99']:.2f} |")
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out("balancer"),
                    help="result folder (default: under the system temp dir)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--cases", nargs="*", default=None, help="case names (default: all)")
    ap.add_argument("--quick", action="store_true", help="2 seeds, 12 steps")
    ap.add_argument("--smoke", action="store_true",
                    help="decision timings at a tiny shape (the test suite's check)")
    ap.add_argument("--timing-only", action="store_true",
                    help="only the decision timings (no case is simulated)")
    ap.add_argument("--piece-tokens", type=int, default=None,
                    help="moves as the live runtime makes them on vLLM: pieces of at most this "
                         "many tokens, a move waiting for the running piece's end")
    ap.add_argument("--piece-seam-s", type=float, default=0.05,
                    help="with --piece-tokens: the wait at each piece end (s)")
    ap.add_argument("--stream-interval", type=int, default=None,
                    help="moves as the live runtime makes them on vLLM with --stream and "
                         "--stream-interval K: at once, keeping the tokens streamed in chunks of "
                         "K (the rest decoded again)")
    ap.add_argument("--no-gate", action="store_true",
                    help="balance every m = 0 step (no balance gate), as before the gate")
    args = ap.parse_args(argv)
    pieces = (None if args.piece_tokens is None else
              PieceSettings(args.piece_tokens, args.piece_seam_s))
    if args.stream_interval is not None:
        if pieces is not None:
            print("--stream-interval and --piece-tokens exclude each other", file=sys.stderr)
            return 2
        pieces = PieceSettings.streamed(args.stream_interval)
    seeds, steps = (2, 12) if args.quick else (args.seeds, args.steps)
    chosen = [c for c in CASES if args.cases is None or c.name in args.cases]
    if args.cases and len(chosen) != len(args.cases):
        known = ", ".join(c.name for c in CASES)
        print(f"unknown case in {args.cases}; choose from {known}", file=sys.stderr)
        return 2
    shape = (8, 16, 20) if args.smoke else (64, 64, 300)
    live = [live_check_timing(*shape, collector=c) for c in (True, False)]  # a fresh process
    for lv in live:
        print(f"live router checks at {lv['in_flight']} in flight (collector "
              f"{'on' if lv['collector'] else 'paused'}): CPU per decision p50 "
              f"{lv['cpu_p50_ms']:.3f} ms, p99 {lv['cpu_p99_ms']:.3f} ms; reading the loads p50 "
              f"{lv['loads_cpu_p50_ms']:.3f} ms, p99 {lv['loads_cpu_p99_ms']:.3f} ms; whole check p50 "
              f"{lv['check_cpu_p50_ms']:.2f} ms, p99 {lv['check_cpu_p99_ms']:.2f} ms "
              f"({lv['moves']} moves in {lv['checks']} checks)", flush=True)
    timing = decision_timing(8, 16, 20) if args.smoke else decision_timing()
    scale = scale_timing(6, 8, 16) if args.smoke else scale_timing()
    print(f"decision in a simulated run at {scale['in_flight']} in flight on "
          f"{scale['replicas']} replicas: p50 {scale['p50_ms']:.2f} ms, p99 {scale['p99_ms']:.2f} "
          f"ms ({scale['decisions']} decisions of at most {scale['max_moves_per_decision']} "
          f"moves; whole check p50 {scale['check_p50_ms']:.2f} ms, p99 "
          f"{scale['check_p99_ms']:.2f} ms over {scale['checks']} checks; CPU time per decision "
          f"p50 {scale['cpu_p50_ms']:.2f} ms, p99 {scale['cpu_p99_ms']:.2f} ms)", flush=True)
    print(f"decision at {timing['in_flight']} in flight, worst case: p50 {timing['p50_ms']:.3f} "
          f"ms, p99 {timing['p99_ms']:.3f} ms (whole check of {timing['mean_moves']:.1f} moves: "
          f"p50 {timing['check_p50_ms']:.2f} ms, p99 {timing['check_p99_ms']:.2f} ms; CPU time "
          f"per decision p50 {timing['cpu_p50_ms']:.3f} ms, p99 {timing['cpu_p99_ms']:.3f} ms)",
          flush=True)
    rows = []
    for case in [] if args.timing_only else chosen:
        row = run_case(case, list(range(seeds)), steps, args.groups, pieces, not args.no_gate)
        rows.append(row)
        print(f"{case.name}: {row['speedup_mean']:.3f}x (min seed {row['min_seed_speedup']:.3f}) "
              f"moves/step {row['moves_per_step']:.0f} prefill {row['prefill_s_per_step']:.1f} s "
              f"[{row['elapsed_s']} s]", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": ".venv/bin/python benchmarks/bench_balancer.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "baseline": "uniform-requests", "steady_from": STEADY_FROM,
        "pieces": None if pieces is None else dataclasses.asdict(pieces),
        "balance_gate": not args.no_gate,
        "decision_timing": timing, "decision_timing_in_sim_64x4096": scale,
        "live_check_timing_64x4096": live[0], "live_check_timing_64x4096_collector_paused": live[1],
        "cases": rows,
    }
    (args.out / "balancer.json").write_text(json.dumps(payload, indent=1) + "\n")
    (args.out / "balancer.md").write_text(to_markdown(rows))
    print(to_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
