"""Agentic rollouts (simulated): every session router against verl's default, paired.

Run: ``PYTHONPATH=src python benchmarks/bench_agentic.py --out benchmarks/results/agentic``
(defaults: profiles ``qwen3-4b-h100`` and ``qwen3-30b-a3b-h100-tp2``, R = 8, 16, 32, 64,
every preset of ``workload.agentic_presets``, 64 groups x 8, 5 seeds, 2 warm-up + 1
measured step, the policies of ``sim.agentic.policies.DEFAULT_POLICIES``; ``--smoke``: a
tiny run). Each cell (profile x preset x R) is written to ``cells/<cell>.json`` as it
finishes and reused when the command is run again (``--force`` recomputes; ``--update P,Q``
reruns only those policies in the cells written and merges them in), then
``agentic.json`` and ``agentic.md`` gather them. ``--workers N`` runs N cells at once (one
process each), the small R first.

Per cell, ``sim.agentic.compare.compare_policies``: every policy of a seed runs the same
trajectories; the speedup of a policy is, per seed, the mean over the measured steps of
``T_verl-sticky(t) / T_policy(t)``, then the mean over seeds with a 95% Student-t interval.
Beside it: prefix-cache hit rate, re-prefilled tokens, moves per step at turn boundaries
and mid-turn, preemptions. The bound is verl's step over the step's lower bound
(``sim.agentic.bound``: no router passes it), paired the same way. The headline table gives
per preset and R: TailSieve, the best other router, the length-informed policy (``place_turn``
told the lengths: a policy, not a bound) and the bound over verl's default, and the share of
the gap between verl's step and the bound that TailSieve and the best other router close
(where the bound gains at most 5%, the cell is not routing-bound). Last, the balance gate's
run: TailSieve over ``--gate-steps`` steps of search-agent (where moves do not pay), which
moves are on in which step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from outdir import default_out

from tailsieve.sim.agentic.api import simulate_agentic
from tailsieve.sim.agentic.compare import AgenticSetup, replica_configs, setup_steps
from tailsieve.sim.agentic.policies import BASELINE, DEFAULT_POLICIES, policy_spec
from tailsieve.sim.agentic.report import (
    best_other,
    format_speedup,
    gap_share,
    over_best_other,
    policy_table,
)
from tailsieve.sim.agentic.run import simulate_policy
from tailsieve.sim.speedup_stats import t_interval
from tailsieve.workload.agentic_presets import AGENTIC_PRESETS
from tailsieve.workload.shipped import portable_path

PROFILES = ("qwen3-4b-h100", "qwen3-30b-a3b-h100-tp2")
REPLICAS = (8, 16, 32, 64)
TARGETS = {"swe-agent": 1.10, "swe-agent-long": 1.10, "search-agent": 1.05,
           "math-code-agent": 1.05}  # issue 33 item 5, over verl's default at R = 8


def _csv(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=default_out("agentic"))
    ap.add_argument("--profiles", type=_csv, default=list(PROFILES))
    ap.add_argument("--replicas", type=lambda s: [int(x) for x in _csv(s)],
                    default=list(REPLICAS))
    ap.add_argument("--presets", type=_csv, default=list(AGENTIC_PRESETS))
    ap.add_argument("--policies", type=_csv, default=list(DEFAULT_POLICIES))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds first-seed .. first-seed + seeds - 1 (held-out runs)")
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--measured-steps", type=int, default=1)
    ap.add_argument("--gate-steps", type=int, default=16,
                    help="steps of the balance-gate run (search-agent, first profile, R = 8)")
    ap.add_argument("--force", action="store_true", help="recompute cells already written")
    ap.add_argument("--update", type=_csv, default=[],
                    help="rerun only these policies in cells already written (with verl's "
                         "default, which must come out the same) and merge them in")
    ap.add_argument("--workers", type=int, default=1,
                    help="cells run at once, one process each (the small R first)")
    ap.add_argument("--smoke", action="store_true", help="a tiny run (tests)")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error(f"--workers must be >= 1, got {args.workers}")
    if args.smoke:
        args.profiles, args.replicas = args.profiles[:1], [2]
        args.presets, args.seeds, args.groups, args.group_size = ["search-agent"], 2, 4, 2
        args.warmup_steps, args.measured_steps, args.gate_steps = 2, 1, 4
    return args


def cell_name(profile: str, preset: str, replicas: int) -> str:
    return f"{profile}_{preset}_r{replicas}"


def run_cell(args: argparse.Namespace, profile: str, preset: str, r: int) -> dict[str, Any]:
    path = args.out / "cells" / f"{cell_name(profile, preset, r)}.json"
    old = dict(json.loads(path.read_text())) if path.exists() else None
    if old is not None and not args.force and not args.update:
        return old
    t0, c0 = time.perf_counter(), time.process_time()
    update = old is not None and not args.force
    cell = simulate_agentic(preset, r, args.update if update else args.policies, args.seeds,
                            profile, args.groups, args.group_size, args.warmup_steps,
                            args.measured_steps, first_seed=args.first_seed)
    if update:
        assert old is not None
        cell = merge_cell(old, cell)
    cell["wall_s"] = time.perf_counter() - t0
    cell["cpu_s"] = time.process_time() - c0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell, indent=1))
    return cell


def merge_cell(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` with ``new``'s policies rerun in it (``--update``), its best other router and
    gap shares recomputed; verl's default must have run the same steps in both."""
    if old["policies"][BASELINE]["step_s"] != new["policies"][BASELINE]["step_s"]:
        raise SystemExit(f"{old['preset']} R = {old['replicas']}: verl's default differs from "
                         "the cell's; rerun it with --force")
    rows = {**old["policies"], **new["policies"]}
    best = best_other(rows)
    bound = old["bound"]["speedup"]
    return {**old, "policies": rows, "best_other": best,
            "tailsieve_gap_share": gap_share(rows.get("tailsieve", {}).get("speedup"), bound),
            "best_other_gap_share": gap_share(rows[best]["speedup"], bound) if best else None}


def gate_run(args: argparse.Namespace) -> dict[str, Any]:
    """TailSieve behind its balance gate over ``--gate-steps`` steps of search-agent (where
    moves do not pay), step by step against verl's default on the same trajectories."""
    setup = AgenticSetup("search-agent", 2 if args.smoke else 8, args.profiles[0], args.groups,
                         args.group_size, 0, args.gate_steps, (0,))
    steps = setup_steps(setup, 0)
    configs = replica_configs(setup.profile, setup.replicas)
    ts = simulate_policy(steps, configs, policy_spec("tailsieve"), 0)
    verl = simulate_policy(steps, configs, policy_spec("verl-sticky"), 0)
    ratios = [v.step_s / t.step_s for v, t in zip(verl, ts, strict=True)
              if v is not None and t is not None]
    on = [bool(t.moves_on) for t in ts if t is not None]
    return {"preset": setup.preset, "replicas": setup.replicas, "profile": setup.profile,
            "moves_on": on, "speedup_by_step": ratios,
            "speedup_mean": sum(ratios) / len(ratios)}


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "-"


def headline(cells: list[dict[str, Any]], profile: str) -> list[str]:
    lines = [f"### {profile}", "",
             "| preset | R | TailSieve | best other | length-informed | bound | gap closed: "
             "TailSieve / best other | TailSieve over best other (paired) | target at R = 8 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        if c["profile"] != profile:
            continue
        rows, best = c["policies"], c["best_other"]
        ts = format_speedup(rows["tailsieve"]) if "tailsieve" in rows else "-"
        bo = f"{best}: {format_speedup(rows[best])}" if best else "-"
        li = format_speedup(rows["length-informed"]) if "length-informed" in rows else "-"
        bound = c.get("bound")
        bound_s = format_speedup(bound) if bound else "-"
        shares = (f"{_pct(c.get('tailsieve_gap_share'))} / {_pct(c.get('best_other_gap_share'))}"
                  if c.get("routing_bound", True) else "not routing-bound (bound <= 1.05x)")
        ratio = (format_speedup(dict(zip(("speedup", "ci_low", "ci_high"), t_interval(
            [a / b for a, b in zip(rows["tailsieve"]["per_seed"], rows[best]["per_seed"],
                                   strict=True)]), strict=True)))
                 if best and "tailsieve" in rows else "-")
        target = f">= {TARGETS[c['preset']]:.2f}x" if c["replicas"] == 8 and \
            c["preset"] in TARGETS else ""
        lines.append(f"| {c['preset']} | {c['replicas']} | {ts} | {bo} | {li} | {bound_s} | "
                     f"{shares} | {ratio} | {target} |")
    return [*lines, ""]


def over_best_table(cells: list[dict[str, Any]]) -> list[str]:
    """TailSieve (and its lever variants that ran) over each cell's best other router, paired
    per seed (issue 39's targets)."""
    names = sorted({p for c in cells for p in c["policies"]
                    if p == "tailsieve" or p.startswith("tailsieve-")},
                   key=lambda p: (p != "tailsieve", p))
    if not names or not any(c.get("best_other") for c in cells):
        return []
    lines = ["## Over the best other router (paired per seed, 95% CI)", "",
             "| profile | preset | R | best other | " + " | ".join(names) + " |",
             "|---|---|---|---|" + "---|" * len(names)]
    for c in cells:
        row = [over_best_other(c["policies"], p) for p in names]
        got = [f"{r['speedup']:.3f}x [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
               if r is not None and r["ci_low"] is not None
               else f"{r['speedup']:.3f}x" if r is not None else "-" for r in row]
        lines.append(f"| {c['profile']} | {c['preset']} | {c['replicas']} | "
                     f"{c.get('best_other') or '-'} | " + " | ".join(got) + " |")
    return [*lines, ""]


def render(args: argparse.Namespace, cells: list[dict[str, Any]]) -> str:
    cmd = "PYTHONPATH=src python benchmarks/bench_agentic.py --out benchmarks/results/agentic"
    out = ["# Agentic rollouts (simulated)", "",
           f"Command: `{cmd}` (this run: profiles {', '.join(args.profiles)}; R = "
           f"{', '.join(map(str, args.replicas))}; presets {', '.join(args.presets)})", "",
           f"{args.groups} groups x {args.group_size}, {args.seeds} seeds from "
           f"{args.first_seed}, "
           f"{args.warmup_steps} warm-up + {args.measured_steps} measured steps; speedup = "
           "paired T_verl-sticky / T_policy with a 95% Student-t interval over seeds. The "
           "bound is T_verl-sticky over the step's lower bound (no router passes it); gap "
           "closed = (T_verl - T_policy) / (T_verl - T_bound).", "",
           "## Headline: over verl's default", ""]
    for profile in args.profiles:
        out += headline(cells, profile)
    out += over_best_table(cells)
    g = args.gate
    out += ["## The balance gate", "",
            f"TailSieve on {g['preset']}, {g['profile']}, R = {g['replicas']}, "
            f"{len(g['moves_on'])} steps (one seed): moves on in steps "
            f"{[i for i, x in enumerate(g['moves_on']) if x]}; over verl's default step by "
            f"step {', '.join(f'{x:.3f}' for x in g['speedup_by_step'])} "
            f"(mean {g['speedup_mean']:.3f}x).", ""]
    out += ["## Every cell", ""]
    for c in cells:
        out += [f"### {c['profile']} / {c['preset']} / R = {c['replicas']}", "",
                policy_table(c["policies"], c.get("bound")), ""]
    return "\n".join(out) + "\n"


def _report(key: tuple[str, str, int], cell: dict[str, Any]) -> dict[str, Any]:
    print(f"{cell_name(*key)}: tailsieve "
          f"{cell['policies'].get('tailsieve', {}).get('speedup', float('nan')):.3f}"
          f" ({cell.get('cpu_s', 0):.0f} s cpu)", file=sys.stderr, flush=True)
    return cell


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    keys = [(profile, preset, r) for profile in args.profiles for preset in args.presets
            for r in args.replicas]
    done: dict[tuple[str, str, int], dict[str, Any]] = {}
    if args.workers == 1:
        for key in keys:
            done[key] = _report(key, run_cell(args, *key))
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            futures = {pool.submit(run_cell, args, *key): key
                       for key in sorted(keys, key=lambda k: (k[2], keys.index(k)))}
            for fut in as_completed(futures):
                done[futures[fut]] = _report(futures[fut], fut.result())
    cells = [done[key] for key in keys]
    args.gate = gate_run(args)
    (args.out / "agentic.json").write_text(json.dumps(
        {"args": {k: portable_path(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                  if k != "gate"}, "cells": cells, "gate": args.gate}, indent=1))
    (args.out / "agentic.md").write_text(render(args, cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
