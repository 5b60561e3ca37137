"""What bounds a length-blind router on the grounded profiles (issue 11's ceiling analysis).

One-shot routings of the same steps (the N groups a step draws, lengths from the workload; no
cutoff, no carry-over), makespan under the all-admit model with the context term, paired
against Uniform on the same step:

* ``uniform``, ``uniform-oracle``, ``seer-oracle`` (the paper's baselines, ``tailsieve.policy``);
* ``seer-ctx``: Seer-style with the context term in its cost (``a0 * L_max + c_b * W +
  k/2 * sum L^2`` of the linear fit), the best request-level router with known lengths here;
* ``spread``: every group's responses dealt one by one over all replicas: TailSieve's balance
  mode, no length read;
* ``isolate-oracle(q, m)``: the q truly longest groups (an oracle selector, no waste) spread
  over m tail replicas, the others spread over the rest: the best that tail isolation with
  spread groups could reach if the cutoff's evidence were perfect and free;
* ``lower bound``: ``tau(1) L_max + k L_max^2 / 2`` of the step's longest response.

Run: ``.venv/bin/python -m benchmarks.paper.length_blind_bound`` (writes
``benchmarks/results/paper/length_blind_bound.json``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_time import all_admit_time
from tailsieve.model.throughput import ThroughputModel
from tailsieve.policy.registry import get_policy
from tailsieve.sim.driver import PairedLengths, epoch_prompt_ids
from tailsieve.sim.workloads import resolve_workload

from .common import Timer, default_out, write_json

NAME = "length_blind_bound"
N, GROUP = 64, 8
CASES = (("qwen3-4b-h100", 8, "paper-math"), ("qwen3-4b-h100", 8, "aime"),
         ("qwen3-30b-a3b-h100-tp2", 4, "paper-math"))
IntArray = npt.NDArray[np.int64]


def makespan(flat: IntArray, rep: IntArray, r: int, model: ThroughputModel) -> float:
    return max(all_admit_time(flat[rep == i], model) for i in range(r))


def seer_ctx(flat: IntArray, r: int, model: ThroughputModel) -> IntArray:
    """Longest first onto the replica whose linear-fit time after adding it is smallest."""
    a, c = model.fit
    k = model.context_s_per_token
    lmax, load = np.zeros(r), np.zeros(r)
    out = np.zeros(flat.size, dtype=np.int64)
    for i in np.argsort(-flat, kind="stable"):
        x = float(flat[i])
        after = np.maximum(lmax, x) * a + load + c * x + k * x * x / 2
        j = int(np.argmin(after))
        out[i], lmax[j], load[j] = j, max(lmax[j], x), load[j] + c * x + k * x * x / 2
    return out


def spread(groups: IntArray, replicas: list[int], out: IntArray, n: int) -> None:
    """Deal the responses of ``groups`` (in order) one by one over ``replicas``."""
    for k, (g, j) in enumerate((g, j) for g in groups for j in range(n)):
        out[g * n + j] = replicas[k % len(replicas)]


def run_case(profile: str, r: int, workload: str, seeds: tuple[int, ...],
             steps: int) -> dict[str, Any]:
    model = load_profile(profile)
    ratios: dict[str, list[float]] = {}
    for seed in seeds:
        name, _, strength = workload.partition("/")
        wl = resolve_workload(name, strength or None, seed=seed, num_prompts=2000)
        lengths = PairedLengths(wl, GROUP, seed)
        ids = epoch_prompt_ids(wl.prompt_ids(), seed)
        for step in range(steps):
            lens = np.array([lengths(next(ids), step) for _ in range(N)])
            flat = lens.ravel()
            base = makespan(flat, np.repeat(np.arange(N) % r, GROUP), r, model)
            routes: dict[str, IntArray] = {}
            for pol in ("uniform-oracle", "seer-oracle"):
                routes[pol] = np.concatenate(get_policy(pol).route(list(lens), r, model).replicas)
            routes["seer-ctx"] = seer_ctx(flat, r, model)
            rep = np.zeros(flat.size, dtype=np.int64)
            spread(np.arange(N), list(range(r)), rep, GROUP)
            routes["spread"] = rep
            rank = np.argsort(-lens.sum(axis=1), kind="stable")
            for m in range(1, r):
                for q in (m, 2 * m, 4 * m):
                    rep = np.zeros(flat.size, dtype=np.int64)
                    spread(rank[:q], list(range(r - m, r)), rep, GROUP)
                    spread(rank[q:], list(range(r - m)), rep, GROUP)
                    routes[f"isolate-oracle({q},{m})"] = rep
            for key, rep in routes.items():
                ratios.setdefault(key, []).append(base / makespan(flat, rep, r, model))
            top = float(flat.max())
            ratios.setdefault("lower bound", []).append(
                base / (model.tau(1) * top + model.context_s_per_token * top * top / 2))
    mean = {k: float(np.mean(v)) for k, v in ratios.items()}
    iso = {k: v for k, v in mean.items() if k.startswith("isolate")}
    best_iso = max(iso, key=lambda k: iso[k])
    keep = {k: v for k, v in mean.items() if not k.startswith("isolate")}
    return {"profile": profile, "replicas": r, "workload": workload,
            "speedup_vs_uniform": {**keep, "best isolate-oracle": iso[best_iso]},
            "best_isolate_oracle_point": best_iso}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out("paper"),
                    help="folder (default: under the system temp dir)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args(argv)
    timer = Timer()
    cases = [run_case(p, r, w, tuple(range(args.seeds)), args.steps) for p, r, w in CASES]
    write_json(args.out, NAME, {"name": NAME, "groups": N, "group_size": GROUP,
                                "seeds": args.seeds, "steps": args.steps, "cases": cases,
                                "runtime_s": timer.elapsed_s})
    for c in cases:
        print(f"== {c['profile']} R={c['replicas']} {c['workload']} "
              f"(best isolate-oracle {c['best_isolate_oracle_point']})")
        for k, v in c["speedup_vs_uniform"].items():
            print(f"  {k:22s} {v:.3f}x")


if __name__ == "__main__":
    main()
