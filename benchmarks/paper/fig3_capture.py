"""Figure 3: partial-rollout capture rate of ground-truth long-tail groups versus rho.

Workloads: the AIME R1-Distill-1.5B trace (single checkpoint, so the "next step" is the other
half of each prompt's samples) and the ``paper-math`` preset; the qwen3-4b-h100 profile (and cpu on AIME).
Two ground truths: ``k = G - N`` long-tail groups (capture = precision = recall), and a fixed
top-5% tail (``tail_fraction = 0.05``: recall). Paper: 85 / 93 / 95% at rho 5 / 10 / 25%.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from tailsieve.model.profiles import load_profile
from tailsieve.workload.capture import CaptureConfig, capture_rates, default_step_pairs
from tailsieve.workload.io import read_trace
from tailsieve.workload.presets import load_workload
from tailsieve.workload.workload_model import ResampleWorkload

from .common import AIME_CSV, PROFILE, Timer, savefig, write_json

NAME = "fig3_capture"
RHOS = (0.05, 0.10, 0.25)
PAPER = {"0.05": 0.85, "0.1": 0.93, "0.25": 0.95}
CASES: tuple[tuple[str, str, float | None], ...] = (
    ("aime", PROFILE, None),
    ("aime", "cpu", None),
    ("paper-math", PROFILE, None),
    ("aime", PROFILE, 0.05),
    ("paper-math", PROFILE, 0.05),
)


def run(out_dir: Path, quick: bool, rounds: int | None = None) -> dict[str, Any]:
    """Capture rates per (workload, profile, ground truth); 200 rounds (50 with ``quick``)."""
    timer = Timer()
    num_rounds = rounds if rounds is not None else (50 if quick else 200)
    aime = ResampleWorkload(read_trace(AIME_CSV), halves="alternate")
    math = load_workload("paper-math", num_prompts=1000, seed=0)
    cases: list[dict[str, Any]] = []
    for wl_name, prof, frac in CASES:
        wl = aime if wl_name == "aime" else math
        pairs = ((0, 1),) if wl_name == "aime" else default_step_pairs(None, num_rounds)
        cfg = CaptureConfig(rhos=RHOS, groups=64, group_size=8, replicas=8, rounds=num_rounds,
                            seed=0, tail_fraction=frac, step_pairs=pairs)
        res = capture_rates(wl, load_profile(prof), cfg)
        cases.append({
            "workload": wl_name,
            "profile": prof,
            "ground_truth": "k = G - N" if frac is None else f"top {frac:.0%} of launched",
            "results": [r.to_dict() for r in res],
        })
    _plot(out_dir / f"{NAME}.png", cases)
    payload: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "settings": {"groups": 64, "group_size": 8, "replicas": 8, "rounds": num_rounds,
                     "rhos": list(RHOS), "seed": 0},
        "cases": cases,
        "paper": PAPER,
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, cases: list[dict[str, Any]]) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    x = np.array(RHOS) * 100
    for ax, key, title in zip(axes, ("same_round_capture", "cross_step_capture"),
                              ("same round (cutoff vs this round's tail)",
                               "next step (the signal TailSieve uses)"), strict=True):
        for c in cases:
            y = [r[key] * 100 for r in c["results"]]
            ax.plot(x, y, "o-", label=f"{c['workload']} {c['profile']}, {c['ground_truth']}")
        ax.plot(x, [v * 100 for v in PAPER.values()], "k*--", ms=10, label="paper Figure 3")
        ax.set_xlabel("rho (%)")
        ax.set_title(title)
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("capture of long-tail groups (%)")
    axes[1].legend(fontsize=7, loc="lower right")
    savefig(fig, path)
