"""Speculation placed by the router against the honest baseline, paired, over seeds.

Run: ``PYTHONPATH=src python benchmarks/bench_spec.py --out benchmarks/results/spec``
(``--seeds 5 --steps 20`` by default; ``--quick``: 2 seeds, 12 steps; ``--cases`` /
``--presets`` pick a subset). Writes ``spec.json`` and ``spec.md`` into ``--out``.

The honest baseline is ``uniform-requests`` with the same engine speculation on every replica
under the same batch-size gate as TailSieve (speculate where it pays: vLLM's
``num_speculative_tokens_per_batch_size``). Beside it (each paired over it,
``sim.spec_runs``): round-robin without speculation (``uniform-requests-nospec``), the
baseline speculating at every batch (``uniform-requests-ungated``), whole groups round-robin
with the same speculation (``uniform-spec``), ``tailsieve`` (moves, groups dealt spread or
whole as ``control.colocate`` decides from the warm-up steps' measured times; whole only for a
server-tree source), ``tailsieve-spread`` (never co-located) and ``seer-oracle`` (knows every
length) with the same speculation. Acceptance follows the draft source
(``model.acceptance``): only a server's suffix tree depends on where a response runs.
Workloads as ``bench_balancer.py``: 4B paper-math R = 8, 4B AIME R = 8, 30B-A3B TP2
paper-math R = 4, N = 64 x 8, profile caps and context term on. Presets: the literature's
(target >= 1.10x; not measured here), ``low`` and the literature's at twice the price (never
below 0.99x), and every measured preset shipped (``tailsieve.model.acceptance
.measured_presets``; none: said so) or given with ``--acceptance-file``. Simulated only: no
live code places speculation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from outdir import default_out

from tailsieve.model.acceptance import (
    LITERATURE,
    AcceptanceCurve,
    get_acceptance,
    load_acceptance_file,
    measured_presets,
)
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import SimSettings, epoch_prompt_ids
from tailsieve.sim.spec_runs import SPEC_VARIANTS, run_spec_variants
from tailsieve.sim.speedup_stats import STEADY_FROM, seed_speedup, t_interval
from tailsieve.sim.workloads import resolve_workload


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    profile: str
    workload: str
    replicas: int


WORKLOADS: tuple[Workload, ...] = (
    Workload("4b-paper-math-r8", "qwen3-4b-h100", "paper-math", 8),
    Workload("4b-aime-r8", "qwen3-4b-h100", "aime", 8),
    Workload("30b-a3b-paper-math-r4", "qwen3-30b-a3b-h100-tp2", "paper-math", 4),
)

# (preset, price, target, kind); "literature" and "guard" rows are not measured acceptance
PRESETS: tuple[tuple[str, float, float, str], ...] = (
    ("seer", 1.0, 1.10, "literature"),
    ("tlt-eagle-tree", 1.0, 1.10, "literature"),
    ("rhymerl-epoch", 1.0, 1.10, "literature"),
    ("low", 1.0, 0.99, "guard: low acceptance"),
    ("seer", 2.0, 0.99, "guard: twice the price"),
    ("tlt-eagle-tree", 2.0, 0.99, "guard: twice the price"),
)

COLUMNS = ("tailsieve", "tailsieve-spread", "seer-oracle", "uniform-requests-nospec",
           "uniform-requests-ungated", "uniform-spec")


def run_case(wl: Workload, curve: AcceptanceCurve, price: float, target: float, kind: str,
             seeds: list[int], steps: int, groups: int) -> dict[str, Any]:
    base = ReplicaConfig.from_profile(load_profile(wl.profile))
    preset = curve.name
    per_seed: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for sd in seeds:
        work = resolve_workload(wl.workload, None, seed=sd)
        ds = work.prompt_ids()
        settings = SimSettings(num_replicas=wl.replicas, num_groups=groups, group_size=8,
                               num_steps=steps, seed=sd)
        res = run_spec_variants(settings, lambda d=ds, s=sd: epoch_prompt_ids(d, s), work,
                                base, curve, price, SPEC_VARIANTS)
        ref = res.runs["uniform-requests"].run
        row: dict[str, Any] = {
            "seed": sd, "colocation": res.colocation.dealing,
            "colocation_reason": res.colocation.reason,
            "offsite_fraction": res.offsite_fraction,
            "baseline_step_s": float(np.mean([r.makespan_s for r in ref.regular
                                              if r.step >= STEADY_FROM])),
        }
        for name in COLUMNS:
            if name in res.runs:
                row[name] = seed_speedup(ref, res.runs[name].run)
        per_seed.append(row)
    out: dict[str, Any] = {
        "workload": wl.name, "profile": wl.profile, "replicas": wl.replicas,
        "preset": preset, "price": price, "target": target, "kind": kind,
        "measured_acceptance": curve.citation.startswith("measured"),
        "acceptance": curve.to_dict(), "seeds": seeds, "steps": steps, "groups": groups,
        "colocated_seeds": sum(r["colocation"] == "group" for r in per_seed),
        "elapsed_s": round(time.perf_counter() - t0, 1), "per_seed": per_seed,
    }
    for name in COLUMNS:
        vals = [r[name] for r in per_seed if name in r]
        if vals:
            mean, lo, hi = t_interval(vals)
            out[name] = {"mean": mean, "ci": [lo, hi], "min_seed": min(vals)}
    out["meets_target"] = out["tailsieve"]["mean"] >= target
    out["spread_meets_target"] = out["tailsieve-spread"]["mean"] >= target
    return out


def _fmt(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "-"
    lo, hi = cell["ci"]
    ci = "" if lo is None else f" [{lo:.3f}, {hi:.3f}]"
    return f"{cell['mean']:.3f}x{ci}"


def to_markdown(rows: list[dict[str, Any]]) -> str:
    head = ("| workload | acceptance | measured? | price | tailsieve (dealing) | target | "
            "tailsieve, spread only | seer-oracle, same spec | baseline ungated | "
            "uniform (groups) + spec | no spec |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        deal = f"{r['colocated_seeds']}/{len(r['seeds'])} grouped"
        tgt = (">= " if r["target"] > 1 else "never below ") + f"{r['target']:.2f}x"
        measured = "measured" if r.get("measured_acceptance") else "not measured"
        lines.append(
            f"| {r['workload']} | {r['preset']} | {measured} | {r['price']:g}x | "
            f"{_fmt(r['tailsieve'])} ({deal}) | {tgt} | {_fmt(r['tailsieve-spread'])} | "
            f"{_fmt(r.get('seer-oracle'))} | {_fmt(r.get('uniform-requests-ungated'))} | "
            f"{_fmt(r.get('uniform-spec'))} | {_fmt(r.get('uniform-requests-nospec'))} |")
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out("spec"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="2 seeds, 12 steps")
    ap.add_argument("--cases", nargs="*", default=None, help="workload names (default: all)")
    ap.add_argument("--presets", nargs="*", default=None,
                    help="acceptance presets (default: the literature's, low, x2 price, measured)")
    ap.add_argument("--acceptance-file", type=Path, default=None,
                    help="a measured acceptance file (tailsieve acceptance measure) whose "
                         "sources run as measured presets, beside any shipped ones")
    args = ap.parse_args(argv)
    seeds, steps = (2, 12) if args.quick else (args.seeds, args.steps)
    wls = [w for w in WORKLOADS if args.cases is None or w.name in args.cases]
    curves = dict(measured_presets())
    if args.acceptance_file is not None:
        curves.update(load_acceptance_file(args.acceptance_file))
    measured = sorted(curves)
    plan = list(PRESETS) + [(name, 1.0, 0.99, "measured") for name in measured]
    if args.presets is not None:
        plan = [p for p in plan if p[0] in args.presets] + [
            (name, 1.0, 0.99, "given") for name in args.presets
            if name not in {p[0] for p in plan}]
    rows = []
    for wl in wls:
        for preset, price, target, kind in plan:
            curve = curves[preset] if preset in curves else get_acceptance(preset)
            row = run_case(wl, curve, price, target, kind, list(range(seeds)), steps,
                           args.groups)
            rows.append(row)
            print(f"{wl.name} {preset} x{price:g}: tailsieve {_fmt(row['tailsieve'])} "
                  f"({row['colocated_seeds']} seeds grouped), spread "
                  f"{_fmt(row['tailsieve-spread'])}, oracle {_fmt(row.get('seer-oracle'))} "
                  f"[{row['elapsed_s']} s]", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": "PYTHONPATH=src python benchmarks/bench_spec.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "baseline": "uniform-requests, the same engine speculation on every replica, under "
                    "the same batch-size gate as tailsieve (speculate where it pays)",
        "simulated_only": "no live code places or gates speculation; on a real server the "
                          "gate is vLLM's num_speculative_tokens_per_batch_size, set at launch",
        "steady_from": STEADY_FROM,
        "literature_presets": {k: v.to_dict() for k, v in LITERATURE.items()},
        "measured_presets": {n: curves[n].to_dict() for n in measured
                             if any(r["preset"] == n for r in rows)} or "none run",
        "cases": rows,
    }
    (args.out / "spec.json").write_text(json.dumps(payload, indent=1) + "\n")
    (args.out / "spec.md").write_text(to_markdown(rows))
    print(to_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
