"""Seeded synthetic length generator.

For prompt ``i``, step ``s`` and sample ``j`` the un-truncated log length is

    log L = log(median_tokens) + a_i + D_s + b_is + e_isj

with ``a_i ~ N(0, prompt_sigma_log^2)`` (prompt effect, fixed per prompt), ``D_s`` a random walk
(``D_0 = 0``, increments ``N(drift_mean_log, drift_sigma_log^2)``: the policy drifting across
checkpoints), ``b_is ~ N(0, interaction_sigma_log^2)`` (prompt x checkpoint) and
``e ~ N(0, sample_sigma_log^2)`` (sampling). The upper side of the log deviation
``x = a + b + e`` may be compressed, ``x -> x / (1 + upper_compression * x)`` for ``x > 0``
(a thinner-than-log-normal upper tail, as in the AIME data). In addition a response "runs away" (loops until
the cap) with probability ``sigmoid(logit(runaway_prob) + runaway_prompt_coef * a_i /
prompt_sigma_log)``. Lengths are rounded, clipped to ``[min_tokens, max_tokens]``; responses at
the cap are truncated (``finish_reason == 'length'``).

``a``, ``D`` and ``b`` are derived from the workload ``seed``; sampling noise and run-aways come
from the ``rng`` passed to each call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.workload.trace import BoolArray, IntArray, Trace

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class SyntheticParams:
    """Parameters of the synthetic generator (log quantities are natural-log tokens)."""

    median_tokens: float
    prompt_sigma_log: float
    sample_sigma_log: float
    interaction_sigma_log: float = 0.0
    drift_sigma_log: float = 0.0
    drift_mean_log: float = 0.0
    runaway_prob: float = 0.0
    runaway_prompt_coef: float = 1.0
    upper_compression: float = 0.0
    max_tokens: int = 16384
    min_tokens: int = 1

    def __post_init__(self) -> None:
        checks = {
            "median_tokens": self.median_tokens > 0,
            "prompt_sigma_log": self.prompt_sigma_log >= 0,
            "sample_sigma_log": self.sample_sigma_log >= 0,
            "interaction_sigma_log": self.interaction_sigma_log >= 0,
            "drift_sigma_log": self.drift_sigma_log >= 0,
            "runaway_prob": 0 <= self.runaway_prob < 1,
            "upper_compression": self.upper_compression >= 0,
            "max_tokens": self.max_tokens >= self.min_tokens >= 1,
        }
        for name, ok in checks.items():
            if not ok or not math.isfinite(float(getattr(self, name))):
                raise ConfigError(f"synthetic params: invalid {name} = {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, float | int]:
        """Plain dict (JSON-friendly)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def runaway_probability(params: SyntheticParams, prompt_effect_log: FloatArray) -> FloatArray:
    """Per-prompt probability that a response loops to the cap."""
    if params.runaway_prob <= 0:
        return np.zeros_like(prompt_effect_log)
    z = prompt_effect_log / params.prompt_sigma_log if params.prompt_sigma_log > 0 else 0.0
    logit = math.log(params.runaway_prob / (1 - params.runaway_prob))
    return np.asarray(1.0 / (1.0 + np.exp(-(logit + params.runaway_prompt_coef * z))))


def compress_upper(dev_log: FloatArray, kappa: float) -> FloatArray:
    """``x / (1 + kappa x)`` for ``x > 0``, identity below (thins the upper tail)."""
    if kappa <= 0:
        return dev_log
    return np.where(dev_log > 0, dev_log / (1.0 + kappa * np.maximum(dev_log, 0.0)), dev_log)


def draw_lengths(
    params: SyntheticParams,
    prompt_effect_log: FloatArray,
    offset_log: FloatArray,
    n: int,
    rng: np.random.Generator,
) -> tuple[IntArray, BoolArray]:
    """``(lengths, truncated)`` of shape ``(len(prompt_effect_log), n)``; ``offset_log`` is the
    per-prompt drift + interaction at this step."""
    k = prompt_effect_log.size
    dev = (prompt_effect_log + offset_log)[:, None] + params.sample_sigma_log * rng.standard_normal(
        (k, n)
    )
    log_len = math.log(params.median_tokens) + compress_upper(dev, params.upper_compression)
    raw = np.exp(np.minimum(log_len, math.log(params.max_tokens) + 1.0))
    lengths = np.clip(np.rint(raw), params.min_tokens, params.max_tokens).astype(np.int64)
    p_run = runaway_probability(params, prompt_effect_log)
    run = rng.random((k, n)) < p_run[:, None]
    lengths[run] = params.max_tokens
    return lengths, lengths >= params.max_tokens


@dataclass(slots=True)
class SyntheticWorkload:
    """``Workload`` over ``num_prompts`` synthetic prompts ``synth-00000, ...`` (see module doc)."""

    params: SyntheticParams
    num_prompts: int
    seed: int = 0
    _effects: FloatArray = field(init=False, repr=False)
    _names: tuple[str, ...] = field(init=False, repr=False)
    _codes: dict[str, int] = field(init=False, repr=False)
    _drift: list[float] = field(init=False, repr=False)
    _inter: dict[int, FloatArray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_prompts < 1:
            raise ConfigError(f"num_prompts must be >= 1, got {self.num_prompts}")
        rng = np.random.default_rng([self.seed, 0])
        z = rng.standard_normal(self.num_prompts)
        if self.num_prompts >= 2 and z.std() > 0:
            z = (z - z.mean()) / z.std()  # realized effects have exactly the stated spread
        self._effects = self.params.prompt_sigma_log * z
        width = max(5, len(str(self.num_prompts - 1)))
        self._names = tuple(f"synth-{i:0{width}d}" for i in range(self.num_prompts))
        self._codes = {p: i for i, p in enumerate(self._names)}
        self._drift = [0.0]
        self._inter = {}

    @property
    def max_tokens(self) -> int:
        """The generation cap."""
        return self.params.max_tokens

    def prompt_ids(self) -> tuple[str, ...]:
        """``synth-00000`` ... in order."""
        return self._names

    def drift_log(self, step: int) -> float:
        """Global log-length offset ``D_step``."""
        if step < 0:
            raise ConfigError(f"step must be >= 0, got {step}")
        while len(self._drift) <= step:
            k = len(self._drift)
            inc = np.random.default_rng([self.seed, 1, k]).normal(
                self.params.drift_mean_log, self.params.drift_sigma_log
            )
            self._drift.append(self._drift[-1] + float(inc))
        return self._drift[step]

    def step_offsets_log(self, step: int) -> FloatArray:
        """Drift plus prompt x step interaction of every prompt at ``step``."""
        inter = self._inter.get(step)
        if inter is None:
            rng = np.random.default_rng([self.seed, 2, step])
            inter = self.params.interaction_sigma_log * rng.standard_normal(self.num_prompts)
            if len(self._inter) > 64:
                self._inter.clear()
            self._inter[step] = inter
        return self.drift_log(step) + inter

    def step_lengths(
        self, step: int, n: int, rng: np.random.Generator
    ) -> tuple[IntArray, BoolArray]:
        """``(lengths, truncated)`` of every prompt at ``step``, shape ``(num_prompts, n)``."""
        return draw_lengths(self.params, self._effects, self.step_offsets_log(step), n, rng)

    def group_lengths(
        self, prompt_id: str, step: int, n: int, rng: np.random.Generator
    ) -> IntArray:
        """``n`` lengths of ``prompt_id`` at ``step``."""
        if n < 1:
            raise ConfigError(f"group size n must be >= 1, got {n}")
        code = self._codes.get(prompt_id)
        if code is None:
            raise ConfigError(f"unknown synthetic prompt {prompt_id!r}")
        off = self.step_offsets_log(step)[code : code + 1]
        lengths, _ = draw_lengths(self.params, self._effects[code : code + 1], off, n, rng)
        return lengths[0]

    lengths = group_lengths

    def generate_trace(self, num_steps: int, samples: int, seed: int = 0) -> Trace:
        """A full trace: every prompt x ``num_steps`` steps x ``samples`` samples (seeded)."""
        if num_steps < 1 or samples < 1:
            raise ConfigError("num_steps and samples must be >= 1")
        rng = np.random.default_rng([self.seed, 3, seed])
        k = self.num_prompts
        lens, trunc = [], []
        for s in range(num_steps):
            ln, tr = self.step_lengths(s, samples, rng)
            lens.append(ln.ravel())
            trunc.append(tr.ravel())
        codes = np.tile(np.repeat(np.arange(k), samples), num_steps)
        return Trace.from_columns(
            codes,
            prompt_names=self._names,
            response_tokens=np.concatenate(lens),
            sample=np.tile(np.arange(samples), k * num_steps),
            step=np.repeat(np.arange(num_steps), k * samples),
            finish_reason=np.where(np.concatenate(trunc), "length", "stop").astype(object),
            source=f"<synthetic seed={self.seed}>",
        )
