"""Section 3.3 check: TailSieve does not change what training consumes.

Uniform and TailSieve on the same prompt stream and lengths (``paper-math`` and ``aime``, gpu
profile, R = 8, N = 64, n = 8):

* prompt composition: over the whole run (TailSieve's flush step included) every drawn prompt
  is delivered exactly once, at most one step after it was drawn, and every prompt Uniform
  delivers is delivered by TailSieve too (the only extras are the surplus drawn in the last
  step, which Uniform would deliver at its next step);
* response lengths: a two-sample KS test (``scipy.stats.ks_2samp``) of the delivered
  response lengths over steps 1..S-1 of each policy;
* interleaving: per steady step, the share of the batch that is regenerated tail (carried)
  groups; min / max over steps 1..S-1 (0 would mean a tail-free batch).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import ks_2samp

from tailsieve.sim.driver import SimSettings
from tailsieve.sim.workloads import resolve_workload

from .common import (
    PROFILE,
    PairedRuns,
    Timer,
    at_step,
    delivered_lengths,
    pools_for,
    savefig,
    simulate,
    write_json,
)

NAME = "bias_check"
R, N, GROUP = 8, 64, 8


def composition(paired: PairedRuns) -> dict[str, Any]:
    """Delivered-prompt bookkeeping of TailSieve against Uniform."""
    ts, uni = paired.run("tailsieve"), paired.run("uniform")
    drawn_at: dict[str, int] = {}
    for r in ts.records:
        for pid in r.drawn_ids:
            drawn_at.setdefault(pid, r.step)
    delivered = Counter(pid for r in ts.records for pid in r.delivered_ids)
    delays = [r.step - drawn_at[pid] for r in ts.records for pid in r.delivered_ids
              if pid in drawn_at]
    drawn = Counter(pid for r in ts.records for pid in r.drawn_ids)
    u_set = {pid for r in uni.records for pid in r.delivered_ids}
    t_set = set(delivered)
    return {
        "tailsieve_delivered_groups": sum(delivered.values()),
        "uniform_delivered_groups": sum(len(r.delivered_ids) for r in uni.records),
        "tailsieve_duplicates": sum(c - 1 for c in delivered.values() if c > 1),
        "tailsieve_delivered_equals_drawn": delivered == drawn,
        "max_delay_steps": max(delays) if delays else 0,
        "share_delayed_one_step": float(np.mean([d == 1 for d in delays])) if delays else 0.0,
        "uniform_not_in_tailsieve": len(u_set - t_set),
        "tailsieve_not_in_uniform": len(t_set - u_set),
    }


def run(out_dir: Path, quick: bool, steps: int | None = None) -> dict[str, Any]:
    """Composition, KS test and tail share; 20 steps (10 with ``quick``)."""
    timer = Timer()
    num_steps = steps if steps is not None else (10 if quick else 20)
    cases: dict[str, Any] = {}
    samples: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for wl_name in ("paper-math", "aime"):
        wl = resolve_workload(wl_name, seed=0, num_prompts=2000)
        s = SimSettings(num_replicas=R, num_groups=N, group_size=GROUP, num_steps=num_steps,
                        seed=0)
        paired = simulate(["uniform", "tailsieve"], s, wl, pools_for(PROFILE))
        steady = lambda t: t >= 1  # noqa: E731  (steps 1..S-1; the flush step is not regular)
        lu = delivered_lengths(paired, "uniform", steady)
        lt = delivered_lengths(paired, "tailsieve", steady)
        ks = ks_2samp(lu, lt)
        # whole run: TailSieve's warm-up and flush included (every prompt it drew)
        lt_all = np.concatenate([paired.lengths(pid, r.step) for r in paired.run("tailsieve").records
                                 for pid in r.delivered_ids])
        lu_all = delivered_lengths(paired, "uniform", lambda t: True)
        ks_all = ks_2samp(lu_all, lt_all)
        shares, q_shares, mean_ratio = [], [], []
        for r in paired.run("tailsieve").regular:
            if r.step < 1:
                continue
            drawn = set(r.drawn_ids)
            shares.append(sum(pid not in drawn for pid in r.delivered_ids) / len(r.delivered_ids))
            q_shares.append(r.q / N)
            lt_k = delivered_lengths(paired, "tailsieve", at_step(r.step))
            lu_k = delivered_lengths(paired, "uniform", at_step(r.step))
            mean_ratio.append(float(lt_k.mean() / lu_k.mean()))
        cases[wl_name] = {
            "composition": composition(paired),
            "ks_statistic": float(ks.statistic),
            "ks_pvalue": float(ks.pvalue),
            "num_responses": [int(lu.size), int(lt.size)],
            "ks_whole_run_statistic": float(ks_all.statistic),
            "ks_whole_run_pvalue": float(ks_all.pvalue),
            "whole_run_mean_length": [float(lu_all.mean()), float(lt_all.mean())],
            "uniform_length": _stats(lu),
            "tailsieve_length": _stats(lt),
            "tail_share_min": min(shares),
            "tail_share_max": max(shares),
            "tail_share_mean": float(np.mean(shares)),
            "q_share_min": min(q_shares),
            "q_share_max": max(q_shares),
            "per_step_mean_length_ratio_min": min(mean_ratio),
            "per_step_mean_length_ratio_max": max(mean_ratio),
            "per_step_mean_length_ratio_mean": float(np.mean(mean_ratio)),
            "tail_share_per_step": shares,
        }
        samples[wl_name] = (lu, lt)
    _plot(out_dir / f"{NAME}.png", samples, cases)
    payload: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "settings": {"profile": PROFILE, "replicas": R, "groups": N, "group_size": GROUP,
                     "steps": num_steps, "seed": 0},
        "cases": cases,
        "paper": {"claim": "same prompt composition and no routing-induced length bias in "
                           "steady state (section 3.3, appendix E)"},
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _stats(x: np.ndarray) -> dict[str, float]:
    return {"mean": float(x.mean()), "p50": float(np.median(x)),
            "p90": float(np.percentile(x, 90)), "max": float(x.max())}


def _plot(path: Path, samples: dict[str, tuple[np.ndarray, np.ndarray]],
          cases: dict[str, Any]) -> None:
    fig, axes = plt.subplots(1, len(samples), figsize=(6 * len(samples), 4))
    for ax, (wl, (lu, lt)) in zip(np.atleast_1d(axes), samples.items(), strict=True):
        for x, lab in ((lu, "uniform"), (lt, "tailsieve")):
            xs = np.sort(x)
            ax.plot(xs, np.arange(1, xs.size + 1) / xs.size, label=lab)
        c = cases[wl]
        ax.set_xscale("log")
        ax.set(xlabel="delivered response length (tokens)", ylabel="CDF",
               title=f"{wl}: KS D={c['ks_statistic']:.3f}, p={c['ks_pvalue']:.2f}; tail share "
                     f"{c['tail_share_min']:.0%}-{c['tail_share_max']:.0%}")
        ax.legend()
        ax.grid(alpha=0.3)
    savefig(fig, path)
