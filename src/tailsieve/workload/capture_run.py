"""A capture-rate experiment on a named source: what ``tailsieve trace capture`` computes once its
options are read (``workload.capture`` has the experiment itself).

::

    run = run_capture("smollm2-math", load_profile("qwen3-4b-h100"), CaptureConfig(rounds=50))
    run.results[0].cross_step_capture        # at the first rho
    run.to_dict()                            # what ``trace capture --json`` prints
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tailsieve.errors import TraceError
from tailsieve.model.throughput import ThroughputModel
from tailsieve.workload.capture import (
    CaptureConfig,
    CaptureResult,
    capture_rates,
    default_step_pairs,
)
from tailsieve.workload.io import read_trace
from tailsieve.workload.presets import PRESETS, aime_trace_path, load_workload
from tailsieve.workload.shipped import SHIPPED_TRACES
from tailsieve.workload.workload_model import ReplayWorkload, ResampleWorkload, Workload

SPLIT_HALVES = (
    "single checkpoint: split halves (step a draws from each prompt's first half of "
    "samples, the next step from the second half, with replacement)"
)


def capture_source(
    source: str, num_prompts: int, seed: int, rounds: int
) -> tuple[Workload, tuple[tuple[int, int], ...], str]:
    """The workload of ``source`` (a preset of ``num_prompts`` prompts, a shipped trace or a
    trace file), its (step a, step b) pairs and how the next step is drawn, in words."""
    if source in PRESETS:
        wl = load_workload(source, num_prompts=num_prompts, seed=seed)
        return wl, default_step_pairs(None, rounds), "synthetic preset: next step regenerated"
    if not Path(source).exists() and source not in SHIPPED_TRACES:
        raise TraceError(
            f"{source}: no such trace file (or preset: {', '.join(PRESETS)}; shipped trace: "
            f"{', '.join(SHIPPED_TRACES)})"
        )
    trace = read_trace(aime_trace_path() if source == "aime" else Path(source))
    if trace.is_multi_checkpoint:
        wl_replay = ReplayWorkload(trace)
        return (wl_replay, default_step_pairs(wl_replay.num_steps, rounds),
                "replay: next checkpoint")
    return ResampleWorkload(trace, halves="alternate"), ((0, 1),), SPLIT_HALVES


@dataclass(frozen=True, slots=True)
class CaptureRun:
    """The capture rates of one source under one throughput model."""

    source: str  # as given (preset, shipped trace name or file)
    profile: str  # the throughput model's name
    config: CaptureConfig  # with the source's step pairs
    method: str  # how the next step's lengths were drawn, in words
    results: tuple[CaptureResult, ...]  # one per rho, in order

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-friendly): the settings, the method and every rho's rates."""
        c = self.config
        return {
            "source": self.source,
            "profile": self.profile,
            "groups": c.groups,
            "group_size": c.group_size,
            "replicas": c.replicas,
            "rounds": c.rounds,
            "seed": c.seed,
            "tail_metric": c.tail_metric,
            "tail_fraction": c.tail_fraction,
            "cross_step_method": self.method,
            "results": [r.to_dict() for r in self.results],
        }


def run_capture(
    source: str, model: ThroughputModel, config: CaptureConfig, num_prompts: int = 1000
) -> CaptureRun:
    """Capture rates of ``source`` (``capture_source``; ``num_prompts`` for a preset) with
    ``config`` (its ``step_pairs`` are the source's) on replicas of ``model``."""
    wl, pairs, method = capture_source(source, num_prompts, config.seed, config.rounds)
    cfg = replace(config, step_pairs=pairs)
    return CaptureRun(source, model.name, cfg, method, tuple(capture_rates(wl, model, cfg)))


__all__ = ["CaptureRun", "capture_source", "run_capture"]
