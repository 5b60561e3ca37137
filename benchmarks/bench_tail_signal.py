"""The paper's tail signal on real lengths: the recorded SmolLM2 trace beside the paper's figures,
the synthetic ``paper-math`` preset and the AIME trace.

Run: ``.venv/bin/python benchmarks/bench_tail_signal.py --out benchmarks/results/tail_signal``
(default: a folder under the system temp dir; ``--quick`` for fewer rounds, steps and seeds;
``--trace FILE`` for another recorded trace with two or more steps). Writes
``tail_signal.json`` and ``tail_signal.md`` (the tables of docs/recorded-trace.md).

Per workload:

* tail shape: P50 / P90 / P99 / max / mean, P90/P50, truncated share, range of group medians;
* within-group signal: the prompt share of length variance (two-way ANOVA, raw and log
  lengths; paper: 64.8%) and the intraclass correlation of log lengths within a group;
* cross-step ranking: AUC of a prompt's mean length at step a for the top 10% prompts at step b
  (paper: > 0.95); the recorded and synthetic traces compare two epochs / steps, AIME (one
  checkpoint) its split halves;
* the partial-rollout cutoff (``workload.capture``): G = N + rho N groups launched round-robin
  (R = 8, N = 64, n = 8, all-admit on the qwen3-4b-h100 profile), the G - N still running when
  the N-th completes, against the G - N longest (max response) groups, this round and the next
  step (paper Figure 3: 85 / 93 / 95% at rho 5 / 10 / 25%);
* the recorded trace by difficulty level (median, mean, capped, correct) and its exact sibling
  copies (``workload.copies``; a clean recording has none);
* the simulator (``sim.api.simulate``): steady step time of every policy, as speedup over
  Uniform (groups whole, round-robin) and over uniform-requests, on the same prompts and
  lengths (paired), with the length-knowing oracles; the recorded trace also on the cpu
  profile (R = 2, N = 16, the machine it was recorded on).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from outdir import default_out

from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.record.math_problems import SHIPPED_PROMPTS
from tailsieve.sim.api import simulate
from tailsieve.workload.analytics import (
    cross_checkpoint_auc,
    percentiles,
    split_half_auc,
    truncated_fraction,
    variance_decomposition,
)
from tailsieve.workload.capture import CaptureConfig, capture_rates, default_step_pairs
from tailsieve.workload.copies import sibling_copies
from tailsieve.workload.io import read_trace
from tailsieve.workload.presets import load_workload
from tailsieve.workload.shipped import AIME_TRACE_PATH, SMOLLM2_TRACE_PATH, portable_path
from tailsieve.workload.synthetic import SyntheticWorkload
from tailsieve.workload.trace import Trace
from tailsieve.workload.workload_model import ReplayWorkload, ResampleWorkload, Workload

RHOS = (0.05, 0.10, 0.25)
PAPER = {"capture": {"0.05": 0.85, "0.1": 0.93, "0.25": 0.95}, "tail_auc_min": 0.95,
         "prompt_share": 0.648, "p50": 1160, "p90": 4115, "truncated": 0.03}
POLICIES = ("uniform", "uniform-requests", "uniform-oracle", "streamrl-oracle", "seer-oracle",
            "topk-oracle", "tailsieve-fixed", "tailsieve")
SYNTH_PROMPTS = 1000


def shape(trace: Trace, cap: int | None) -> dict[str, Any]:
    """Length percentiles, truncation and the spread of group medians."""
    lens = trace.response_tokens
    q = percentiles(lens, (50, 90, 99))
    frac, _ = truncated_fraction(trace, None if trace.finish_reason is not None else cap)
    _, _, cell = trace.cell_index()
    order = np.argsort(cell, kind="stable")
    groups = np.split(lens[order], np.cumsum(np.bincount(cell))[:-1])
    med = np.array([np.median(g) for g in groups])
    return {"rows": trace.num_rows, "prompts": trace.num_prompts, "steps": int(trace.steps.size),
            "p50": q["p50"], "p90": q["p90"], "p99": q["p99"], "max": int(lens.max()),
            "mean": float(lens.mean()), "p90_over_p50": q["p90"] / q["p50"],
            "truncated": frac, "group_median_min": float(med.min()),
            "group_median_max": float(med.max()),
            "group_median_p10": float(np.percentile(med, 10)),
            "group_median_p90": float(np.percentile(med, 90))}


def intraclass_correlation(trace: Trace) -> float:
    """ICC(1) of log lengths within (prompt, step) groups: the correlation of two responses
    of one group (one-way ANOVA, groups of equal or unequal size)."""
    y = np.log(np.maximum(trace.response_tokens, 1).astype(np.float64))
    _, _, cell = trace.cell_index()
    n_g = np.bincount(cell).astype(np.float64)
    mean_g = np.bincount(cell, y) / n_g
    k, n = n_g.size, y.size
    msb = float(np.sum(n_g * (mean_g - y.mean()) ** 2) / (k - 1))
    msw = float(np.sum((y - mean_g[cell]) ** 2) / (n - k))
    n0 = (n - np.sum(n_g**2) / n) / (k - 1)
    return (msb - msw) / (msb + (n0 - 1) * msw)


def signal(trace: Trace) -> dict[str, Any]:
    """Prompt share of variance, within-group correlation and the cross-step ranking AUC."""
    raw = variance_decomposition(trace).shares()
    log = variance_decomposition(trace, log=True).shares()
    out: dict[str, Any] = {"prompt_share": raw["prompt"], "prompt_share_log": log["prompt"],
                           "interaction_share": raw["interaction"],
                           "sampling_share": raw["sampling"], "icc_log": intraclass_correlation(trace)}
    if trace.is_multi_checkpoint:
        out["tail_auc"] = float(np.mean([v for _, _, v in cross_checkpoint_auc(trace, 0.1)]))
        out["tail_auc_kind"] = "across steps"
    else:
        out["tail_auc"] = split_half_auc(trace, 0.1)
        out["tail_auc_kind"] = "split halves (one checkpoint)"
    return out


def capture(wl: Workload, pairs: tuple[tuple[int, int], ...], rounds: int,
            metric: str) -> list[dict[str, Any]]:
    """Capture per rho; ``metric``: a group's size is its longest response (``max``, the
    paper's) or its total tokens (``total``)."""
    cfg = CaptureConfig(rhos=RHOS, groups=64, group_size=8, replicas=8, rounds=rounds, seed=0,
                        step_pairs=pairs, tail_metric=metric)
    return [r.to_dict() for r in capture_rates(wl, load_profile(DEFAULT_PROFILE), cfg)]


def by_level(trace: Trace, cap: int) -> list[dict[str, Any]]:
    """The recorded trace by difficulty level of the shipped math prompts (both epochs): median
    and mean length, share stopped at the cap, share correct; the last row is all levels."""
    level = {}
    for line in SHIPPED_PROMPTS.read_text().splitlines():
        row = json.loads(line)
        level[row["prompt_id"]] = int(row["level"])
    lv = np.array([level.get(str(p), 0) for p in trace.prompt_id_array()])
    lens, correct = trace.response_tokens, trace.correct
    rows = []
    for k in [*sorted(set(lv.tolist())), None]:
        m = np.ones(lv.size, dtype=bool) if k is None else lv == k
        rows.append({"level": "all" if k is None else k, "responses": int(m.sum()),
                     "median": float(np.median(lens[m])), "mean": float(lens[m].mean()),
                     "capped": float(np.mean(lens[m] >= cap)),
                     "correct": None if correct is None else float(correct[m].mean())})
    return rows


def capped_group_share(trace: Trace, cap: int) -> float:
    """Share of (prompt, step) groups whose longest response sits at the cap: under the ``max``
    metric they all tie as "longest", so a random candidate set captures about this share."""
    _, _, cell = trace.cell_index()
    return float(np.mean(np.bincount(cell, trace.response_tokens >= cap) > 0))


def sim(workload: str, profile: str, replicas: int, groups: int, steps: int,
        seeds: int) -> dict[str, Any]:
    """Steady speedups of every policy over Uniform and over uniform-requests (paired)."""
    res = simulate(workload, policies=list(POLICIES), replicas=replicas, groups=groups,
                   group_size=8, steps=steps, profile=profile, seed=0, seeds=seeds,
                   num_prompts=SYNTH_PROMPTS)
    s = res.summaries
    ur = s["uniform-requests"]["steady_step_s"]
    rows = {}
    for name in POLICIES:
        st = s[name].get("paired_stat") or {}
        rows[name] = {
            "steady_step_s": s[name]["steady_step_s"],
            "vs_uniform": s[name]["speedup_vs_uniform"],
            "vs_uniform_paired_mean": st.get("mean"),
            "vs_uniform_ci": [st.get("ci_low"), st.get("ci_high")],
            "vs_uniform_requests": ur / s[name]["steady_step_s"],
            "moves_per_step": s[name]["moves_per_step"],
            "lower_bound_ratio": s[name]["steady_lower_bound_ratio"],
            "wasted_token_fraction": s[name]["wasted_token_fraction"],
        }
    return {"workload": portable_path(workload), "profile": profile, "replicas": replicas,
            "groups": groups, "group_size": 8, "steps": steps, "seeds": seeds, "policies": rows}


def run(trace_path: Path, quick: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    rounds, steps, seeds = (40, 8, 1) if quick else (200, 20, 3)
    real = read_trace(trace_path)
    if not real.is_multi_checkpoint:
        raise SystemExit(f"{trace_path}: needs two or more steps (epochs)")
    synth = load_workload("paper-math", num_prompts=SYNTH_PROMPTS, seed=0)
    assert isinstance(synth, SyntheticWorkload)
    aime = read_trace(AIME_TRACE_PATH)
    traces = {"smollm2-math": (real, 1024), "paper-math": (synth.generate_trace(2, 8), 16384),
              "aime": (aime, 16000)}
    wls: dict[str, tuple[Workload, tuple[tuple[int, int], ...]]] = {
        "smollm2-math": (ReplayWorkload(real), ((0, 1),)),
        "paper-math": (synth, default_step_pairs(None, rounds)),
        "aime": (ResampleWorkload(aime, halves="alternate"), ((0, 1),)),
    }
    real_name = "smollm2-math" if trace_path.resolve() == SMOLLM2_TRACE_PATH else str(trace_path)
    sim_name = {"smollm2-math": real_name, "paper-math": "paper-math", "aime": "aime"}
    workloads = {}
    for name, (tr, cap) in traces.items():
        wl, pairs = wls[name]
        workloads[name] = {
            "shape": {**shape(tr, cap), "capped_group_share": capped_group_share(tr, cap)},
            "signal": signal(tr),
            "capture": capture(wl, pairs, rounds, "max"),
            "capture_total": capture(wl, pairs, rounds, "total"),
            "sim": sim(sim_name[name], DEFAULT_PROFILE, 8, 64, steps, seeds),
        }
    workloads["smollm2-math"]["sim_cpu"] = sim(real_name, "cpu", 2, 16, steps, seeds)
    workloads["smollm2-math"]["levels"] = by_level(real, 1024)
    workloads["smollm2-math"]["sibling_copies"] = sibling_copies(real).to_dict(max_examples=3)
    return {
        "name": "tail_signal", "quick": quick, "trace": portable_path(trace_path),
        "settings": {"capture": {"groups": 64, "group_size": 8, "replicas": 8,
                                 "rounds": rounds, "profile": DEFAULT_PROFILE,
                                 "ground_truth": "k = G - N longest groups (max response)"},
                     "sim_steps": steps, "sim_seeds": seeds, "synthetic_prompts": SYNTH_PROMPTS},
        "paper": PAPER, "workloads": workloads,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "runtime_s": time.perf_counter() - t0,
    }


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def markdown(p: dict[str, Any]) -> str:
    """The tables of the docs page."""
    w = p["workloads"]
    names = list(w)
    head = "| | paper | " + " | ".join(names) + " |\n|---|---|" + "---|" * len(names) + "\n"
    lines = ["## Tail shape and within-group signal\n\n", head]

    def row(label: str, paper: str, f: Any) -> None:
        lines.append(f"| {label} | {paper} | " + " | ".join(f(w[n]) for n in names) + " |\n")

    row("P50 / P90 tokens", "1,160 / 4,115",
        lambda x: f"{x['shape']['p50']:,.0f} / {x['shape']['p90']:,.0f}")
    row("P99 / max tokens", "- / -", lambda x: f"{x['shape']['p99']:,.0f} / {x['shape']['max']:,}")
    row("mean tokens", "-", lambda x: f"{x['shape']['mean']:,.0f}")
    row("P90 / P50", "3.55", lambda x: f"{x['shape']['p90_over_p50']:.2f}")
    row("truncated", "~3%", lambda x: _pct(x["shape"]["truncated"]))
    row("group medians (min-max)", "-",
        lambda x: f"{x['shape']['group_median_min']:,.0f}-{x['shape']['group_median_max']:,.0f}")
    row("prompt share of variance (raw / log)", "64.8%",
        lambda x: f"{_pct(x['signal']['prompt_share'])} / {_pct(x['signal']['prompt_share_log'])}")
    row("within-group correlation (ICC, log)", "-", lambda x: f"{x['signal']['icc_log']:.2f}")
    row("tail-ranking AUC (top 10%)", "> 0.95",
        lambda x: f"{x['signal']['tail_auc']:.3f}" + ("*" if "split" in
                                                       x["signal"]["tail_auc_kind"] else ""))
    lines.append("\n\\* AIME has one checkpoint: split halves of each prompt's samples.\n")
    real = w["smollm2-math"]
    if "levels" in real:
        c = real["sibling_copies"]
        lines.append(f"\n## smollm2-math by difficulty level (both epochs)\n\n"
                     f"Exact sibling copies (identical token ids within a group): "
                     f"{c['num_copies']} of {c['num_responses']:,} responses.\n\n"
                     "| level | median tokens | mean | stopped at 1,024 | correct |\n"
                     "|---|---|---|---|---|\n")
        for r in real["levels"]:
            cor = "-" if r["correct"] is None else _pct(r["correct"])
            lines.append(f"| {r['level']} | {r['median']:,.0f} | {r['mean']:,.0f} | "
                         f"{_pct(r['capped'])} | {cor} |\n")
    lines.append("\n## Partial-rollout cutoff capture (R = 8, N = 64, n = 8)\n\n")
    lines.append("Captured share of the G - N longest groups: this round / the next step "
                 "(the signal TailSieve uses). A group's size: its longest response (the "
                 "paper's), or its total tokens.\n\n")
    lines.append("| rho | size | paper | random | " + " | ".join(names) + " |\n")
    lines.append("|---|---|---|---|" + "---|" * len(names) + "\n")
    for key, label in (("capture", "longest"), ("capture_total", "total")):
        for j, rho in enumerate(RHOS):
            paper = _pct(PAPER["capture"][f"{rho:g}"]) if key == "capture" else "-"
            rand = _pct(w[names[0]][key][j]["random_baseline"])
            cells = [f"{_pct(w[n][key][j]['same_round_capture'])} / "
                     f"{_pct(w[n][key][j]['cross_step_capture'])}" for n in names]
            lines.append(f"| {rho:.0%} | {label} | {paper} | {rand} | " + " | ".join(cells)
                         + " |\n")
    lines.append("| | groups whose longest response is at the cap | | | " + " | ".join(
        _pct(w[n]["shape"]["capped_group_share"]) for n in names) + " |\n")
    cases = [(n, w[n]["sim"]) for n in names] + [("smollm2-math (cpu)", w["smollm2-math"]["sim_cpu"])]
    lines.append("\n## Simulator: steady step speedup over Uniform / over uniform-requests\n\n")
    lines.append("| policy | " + " | ".join(
        f"{n}, {c['profile']} R={c['replicas']} N={c['groups']}" for n, c in cases) + " |\n")
    lines.append("|---|" + "---|" * len(cases) + "\n")
    for pol in POLICIES[1:]:
        cells = [f"{c['policies'][pol]['vs_uniform']:.3f}x / "
                 f"{c['policies'][pol]['vs_uniform_requests']:.3f}x" for _, c in cases]
        lines.append(f"| {pol} | " + " | ".join(cells) + " |\n")
    lines.append("| uniform-requests / lower bound | " + " | ".join(
        f"{c['policies']['uniform-requests']['lower_bound_ratio']:.2f}" for _, c in cases)
        + " |\n")
    lines.append("| tailsieve moves per step | " + " | ".join(
        f"{c['policies']['tailsieve']['moves_per_step']:.1f}" for _, c in cases) + " |\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out("tail_signal"))
    ap.add_argument("--trace", type=Path, default=SMOLLM2_TRACE_PATH,
                    help="recorded trace with >= 2 steps (default: the shipped smollm2-math)")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    payload = run(a.trace, a.quick)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "tail_signal.json").write_text(json.dumps(payload, indent=2) + "\n")
    (a.out / "tail_signal.md").write_text(markdown(payload))
    print(markdown(payload))
    print(f"wrote {a.out}/tail_signal.json and tail_signal.md in {payload['runtime_s']:.0f} s",
          file=sys.stderr)
    return payload


if __name__ == "__main__":
    main()
