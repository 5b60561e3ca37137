"""Workloads for the simulator: ``tailsieve.workload`` models, optionally tail-transformed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailsieve.workload.presets import load_workload
from tailsieve.workload.transform import TailTransform, fit_tail_transform, parse_tail_strength
from tailsieve.workload.workload_model import Workload

IntArray = npt.NDArray[np.int64]
CALIBRATION_PROMPTS = 400  # prompts sampled (at step 0) to fit the tail transform
CALIBRATION_SAMPLES = 8


@dataclass(slots=True)
class TailStrengthWorkload:
    """A workload whose lengths go through the paper's A.5 tail-strength transform, fitted
    once on a fixed sample of the base workload (so P90/P50 of the result is ``r``)."""

    base: Workload
    transform: TailTransform

    @classmethod
    def fit(cls, base: Workload, strength: str | float, seed: int = 0) -> TailStrengthWorkload:
        ids = base.prompt_ids()[:CALIBRATION_PROMPTS]
        rng = np.random.default_rng([seed, 0xA5])
        sample = np.concatenate(
            [base.group_lengths(p, 0, CALIBRATION_SAMPLES, rng) for p in ids]
        )
        return cls(base, fit_tail_transform(sample, strength))

    @property
    def max_tokens(self) -> int | None:
        return self.base.max_tokens

    def prompt_ids(self) -> tuple[str, ...]:
        return self.base.prompt_ids()

    def group_lengths(
        self, prompt_id: str, step: int, n: int, rng: np.random.Generator
    ) -> IntArray:
        return self.transform.apply(self.base.group_lengths(prompt_id, step, n, rng))


def trace_prompt_tokens(workload: Any) -> dict[str, int] | None:
    """Prompt tokens per prompt (the median over its rows) when the workload replays a trace
    with a ``prompt_tokens`` column, else None. Under the profile's context term the simulator
    counts them as context held by every response of the group (and charges their prefill
    when the replica has a prefill cost)."""
    base = getattr(workload, "base", workload)
    trace = getattr(base, "trace", None)
    ptoks = getattr(trace, "prompt_tokens", None)
    if trace is None or ptoks is None:
        return None
    codes = np.asarray(trace.prompt_codes)
    return {name: int(np.median(ptoks[codes == i])) for i, name in enumerate(trace.prompt_names)}


def resolve_workload(
    name_or_path: str, tail_strength: str | None = None, seed: int = 0, num_prompts: int = 1000
) -> Workload | TailStrengthWorkload:
    """A preset (``paper-math``, ``aime-r1``), ``aime`` (the real AIME trace, resampled),
    ``smollm2-math`` (the recorded SmolLM2 trace, replayed) or a trace file; with ``tail_strength`` (weak | real | strong | r) the A.5 transform on top."""
    wl = load_workload(name_or_path, num_prompts=num_prompts, seed=seed)
    if tail_strength is None or parse_tail_strength(tail_strength) is None:
        return wl
    return TailStrengthWorkload.fit(wl, tail_strength, seed)
