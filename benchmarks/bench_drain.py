"""The single-turn drain's levers, each alone and together, against per-request round-robin
and the length-knowing reference, paired over seeds.

Run: ``PYTHONPATH=src python benchmarks/bench_drain.py --out benchmarks/results/drain``
(``--seeds 5 --steps 20`` by default; ``--cases NAME ...`` runs a subset; ``--smoke``: one
seed, a tiny shape). Writes ``drain.json`` and ``drain.md`` into ``--out``.

Every case is one of ``bench_balancer``'s (same profiles, workloads, KV capacity and running
cap) plus a KV-bound one (the 4B profile with an eighth of its KV cache, where replicas
preempt and engine priority can act). On the same prompts and lengths: ``uniform-requests``
(the baseline), ``seer-oracle`` (the length-knowing reference: every response placed longest
first, told its length) and ``tailsieve`` four ways: the balancer alone (``none``), with LPT
moves in the drain (``lpt``, ``core.drain``), with engine priority by tokens generated
(``priority``: the simulated replicas run vLLM's priority policy) and with both. Speedup =
the mean over steady steps (index >= 5) of ``T_uniform-requests(t) / T(t)`` per seed, then
the mean over seeds with a 95% Student-t interval; ``share`` = the variant's gain over the
length-knowing one's, ``(speedup - 1) / (seer - 1)``; ``vs none`` = the variant over the
balancer alone, paired per seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_balancer import CASES, Case, pools_for
from outdir import default_out

from tailsieve.control.factory import make_controller
from tailsieve.core.controller import Controller
from tailsieve.sim.driver import ControllerFactory, SimSettings, epoch_prompt_ids, run_policies
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.speedup_stats import STEADY_FROM, seed_speedup, t_interval
from tailsieve.sim.workloads import resolve_workload

VARIANTS: dict[str, tuple[bool, bool]] = {  # name -> (drain_lpt, drain_priority)
    "none": (False, False), "lpt": (True, False), "priority": (False, True), "both": (True, True),
}
KV_BOUND = Case("4b-paper-math-kv-eighth", "qwen3-4b-h100", "paper-math", 8, 0.99,
                kv_scale=0.125)
DRAIN_CASES: tuple[Case, ...] = (*CASES, KV_BOUND)
TARGET = ("4b-paper-math-r8", 1.14)  # the single-turn target over uniform-requests


def drain_controllers(lpt: bool, priority: bool) -> ControllerFactory:
    def factory(name: str, settings: SimSettings, pools: PoolConfigs) -> Controller:
        cfg = dataclasses.replace(settings.controller_config(), drain_lpt=lpt,
                                  drain_priority=priority)
        return make_controller(name, cfg, pools.tail.throughput, pools.bulk.throughput)
    return factory


def run_case(case: Case, seeds: list[int], steps: int, groups: int) -> dict[str, Any]:
    pools = pools_for(case)
    t0 = time.perf_counter()
    per: dict[str, list[float]] = {k: [] for k in ("seer-oracle", *VARIANTS)}
    vs_none: dict[str, list[float]] = {k: [] for k in VARIANTS}
    preempt: dict[str, list[float]] = {k: [] for k in ("uniform-requests", *VARIANTS)}
    for sd in seeds:
        wl = resolve_workload(case.workload, case.tail_strength, seed=sd)
        ds = wl.prompt_ids()
        settings = SimSettings(num_replicas=case.replicas, num_groups=groups, group_size=8,
                               num_steps=steps, seed=sd)
        base = run_policies(["uniform-requests", "seer-oracle"], settings,
                            lambda ds=ds, s=sd: epoch_prompt_ids(ds, s), wl, pools)
        ur = base["uniform-requests"].run
        per["seer-oracle"].append(seed_speedup(ur, base["seer-oracle"].run))
        preempt["uniform-requests"].append(_preemptions(ur))
        runs = {}
        for name, (lpt, prio) in VARIANTS.items():
            runs[name] = run_policies(["tailsieve"], settings,
                                      lambda ds=ds, s=sd: epoch_prompt_ids(ds, s), wl, pools,
                                      drain_controllers(lpt, prio))["tailsieve"].run
            per[name].append(seed_speedup(ur, runs[name]))
            preempt[name].append(_preemptions(runs[name]))
        for name in VARIANTS:
            vs_none[name].append(seed_speedup(runs["none"], runs[name]))
    seer = float(np.mean(per["seer-oracle"]))
    row: dict[str, Any] = {**dataclasses.asdict(case), "seeds": seeds, "steps": steps,
                           "groups": groups, "elapsed_s": round(time.perf_counter() - t0, 1)}
    for name, xs in per.items():
        mean, lo, hi = t_interval(xs)
        row[name] = {"speedup_mean": mean, "speedup_ci": [lo, hi], "min_seed": min(xs),
                     "per_seed": xs}
        if name in VARIANTS:
            m2, lo2, hi2 = t_interval(vs_none[name])
            row[name]["share_of_length_knowing_gain"] = (mean - 1) / (seer - 1) \
                if seer > 1 else None
            row[name]["vs_none_mean"] = m2
            row[name]["vs_none_ci"] = [lo2, hi2]
            row[name]["preemptions_per_step"] = float(np.mean(preempt[name]))
    row["uniform_requests_preemptions_per_step"] = float(np.mean(preempt["uniform-requests"]))
    return row


def _preemptions(run: Any) -> float:
    steady = [r for r in run.regular if r.step >= STEADY_FROM]
    return float(np.mean([r.num_preemptions for r in steady])) if steady else 0.0


def _ci(r: dict[str, Any]) -> str:
    lo, hi = r["speedup_ci"]
    ci = "" if lo is None else f" [{lo:.3f}, {hi:.3f}]"
    return f"{r['speedup_mean']:.3f}x{ci}"


def to_markdown(rows: list[dict[str, Any]]) -> str:
    head = ("| case | R | balancer alone | + LPT in the drain | + engine priority | both | "
            "seer-oracle (knows lengths) | LPT: share of its gain | LPT vs alone |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    lines = []
    for r in rows:
        lpt = r["lpt"]
        share = lpt["share_of_length_knowing_gain"]
        lo, hi = lpt["vs_none_ci"]
        vs = f"{lpt['vs_none_mean']:.3f}x" + ("" if lo is None else f" [{lo:.3f}, {hi:.3f}]")
        lines.append(
            f"| {r['name']} | {r['replicas']} | {_ci(r['none'])} | {_ci(lpt)} | "
            f"{_ci(r['priority'])} | {_ci(r['both'])} | {_ci(r['seer-oracle'])} | "
            f"{'-' if share is None else f'{100 * share:.0f}%'} | {vs} |")
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out("drain"),
                    help="result folder (default: under the system temp dir)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--cases", nargs="*", default=None, help="case names (default: all)")
    ap.add_argument("--smoke", action="store_true", help="1 seed, 7 steps, 16 groups")
    args = ap.parse_args(argv)
    seeds, steps, groups = (1, 7, 16) if args.smoke else (args.seeds, args.steps, args.groups)
    chosen = [c for c in DRAIN_CASES if args.cases is None or c.name in args.cases]
    if args.cases and len(chosen) != len(args.cases):
        known = ", ".join(c.name for c in DRAIN_CASES)
        print(f"unknown case in {args.cases}; choose from {known}", file=sys.stderr)
        return 2
    rows = []
    for case in chosen:
        row = run_case(case, list(range(seeds)), steps, groups)
        rows.append(row)
        print(f"{case.name}: " + ", ".join(
            f"{k} {row[k]['speedup_mean']:.3f}x" for k in (*VARIANTS, "seer-oracle"))
              + f" [{row['elapsed_s']} s]", flush=True)
    target = next((r for r in rows if r["name"] == TARGET[0]), None)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": ".venv/bin/python benchmarks/bench_drain.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "baseline": "uniform-requests", "reference": "seer-oracle", "steady_from": STEADY_FROM,
        "target": {"case": TARGET[0], "speedup": TARGET[1],
                   "met": None if target is None else
                   max(target[v]["speedup_mean"] for v in VARIANTS) >= TARGET[1]},
        "cases": rows,
    }
    (args.out / "drain.json").write_text(json.dumps(payload, indent=1) + "\n")
    (args.out / "drain.md").write_text(to_markdown(rows))
    print(to_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
