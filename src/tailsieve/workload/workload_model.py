"""Workload models: where a prompt group's ``n`` response lengths come from at a given step.

Every model implements the ``Workload`` protocol:

* ``prompt_ids()`` -- the finite, ordered tuple of prompts (the dataset);
* ``group_lengths(prompt_id, step, n, rng)`` -- ``n`` response lengths (int64 tokens) of that
  prompt's group at ``step`` (``lengths`` is an alias);
* ``max_tokens`` -- the generation cap (``None`` if unknown).

``prompt_stream(workload, count, rng)`` turns the dataset into an ordered stream of any length
(epochs, each reshuffled by ``rng``; in dataset order when ``rng`` is None).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol, runtime_checkable

import numpy as np

from tailsieve.errors import ConfigError, TraceError
from tailsieve.workload.trace import IntArray, Trace


@runtime_checkable
class Workload(Protocol):
    """Source of prompt-group response lengths (see module doc)."""

    @property
    def max_tokens(self) -> int | None: ...

    def prompt_ids(self) -> tuple[str, ...]: ...

    def group_lengths(
        self, prompt_id: str, step: int, n: int, rng: np.random.Generator
    ) -> IntArray: ...

    def lengths(self, prompt_id: str, step: int, n: int, rng: np.random.Generator) -> IntArray: ...


def iter_prompts(workload: Workload, rng: np.random.Generator | None = None) -> Iterator[str]:
    """Infinite prompt stream: whole epochs of ``prompt_ids()``, each shuffled by ``rng`` (in
    dataset order when ``rng`` is None)."""
    ids = workload.prompt_ids()
    if not ids:
        raise ConfigError("workload has no prompts")
    while True:
        if rng is None:
            yield from ids
        else:
            for i in rng.permutation(len(ids)).tolist():
                yield ids[i]


def prompt_stream(
    workload: Workload, count: int, rng: np.random.Generator | None = None
) -> list[str]:
    """The first ``count`` prompts of ``iter_prompts(workload, rng)``."""
    if count < 0:
        raise ConfigError(f"count must be >= 0, got {count}")
    return list(islice(iter_prompts(workload, rng), count))


def _check_n(n: int) -> None:
    if n < 1:
        raise ConfigError(f"group size n must be >= 1, got {n}")


@dataclass(slots=True)
class ReplayWorkload:
    """Exact lengths from a multi-checkpoint trace.

    Step ``k`` reads the trace's ``k``-th checkpoint in sorted order (modulo the number of
    checkpoints when ``wrap_steps``); ``n`` must not exceed the samples of that (prompt, step)
    cell, and the first ``n`` in sample order are returned (``rng`` is unused).
    """

    trace: Trace
    wrap_steps: bool = True
    max_tokens: int | None = None
    _cells: dict[tuple[int, int], IntArray] = field(init=False, repr=False)
    _codes: dict[str, int] = field(init=False, repr=False)
    _steps: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        tr = self.trace
        order = np.lexsort((tr.sample, tr.step, tr.prompt_codes))
        keys = np.stack([tr.prompt_codes[order], tr.step[order]], axis=1)
        lens = tr.response_tokens[order]
        cut = np.flatnonzero(np.any(keys[1:] != keys[:-1], axis=1)) + 1
        self._cells = {
            (int(k[0]), int(k[1])): chunk
            for k, chunk in zip(keys[np.r_[0, cut]], np.split(lens, cut), strict=True)
        }
        self._codes = {p: i for i, p in enumerate(tr.prompt_names)}
        self._steps = tr.steps.tolist()

    @property
    def num_steps(self) -> int:
        """Number of checkpoints in the trace."""
        return len(self._steps)

    def prompt_ids(self) -> tuple[str, ...]:
        """Prompts in order of first appearance in the trace."""
        return self.trace.prompt_names

    def group_lengths(
        self, prompt_id: str, step: int, n: int, rng: np.random.Generator
    ) -> IntArray:
        """The first ``n`` recorded lengths of ``prompt_id`` at checkpoint index ``step``."""
        _check_n(n)
        if step < 0 or (not self.wrap_steps and step >= len(self._steps)):
            raise ConfigError(f"step {step} outside the trace's {len(self._steps)} checkpoints")
        ckpt = self._steps[step % len(self._steps)]
        code = self._codes.get(prompt_id)
        cell = None if code is None else self._cells.get((code, ckpt))
        if cell is None:
            raise TraceError(
                f"{self.trace.source}: prompt {prompt_id!r} has no rows at step {ckpt}"
            )
        if n > cell.size:
            raise ConfigError(
                f"{self.trace.source}: prompt {prompt_id!r} step {ckpt} has {cell.size} samples, "
                f"{n} requested"
            )
        return cell[:n].copy()

    lengths = group_lengths


@dataclass(slots=True)
class ResampleWorkload:
    """Lengths drawn with replacement from each prompt's own samples (all steps pooled), times
    an optional global log-normal drift: ``exp(D_step)`` with ``D`` a random walk of increments
    ``N(0, drift_sigma_log^2)`` seeded by ``drift_seed`` (``D_0 = 0``); clipped to ``max_tokens``.

    ``halves`` (``"none"``, ``"alternate"``): with ``"alternate"``, even steps draw from the first
    half of each prompt's samples and odd steps from the second half, so two adjacent steps are
    independent regenerations (used for cross-step analyses of single-checkpoint traces).
    """

    trace: Trace
    drift_sigma_log: float = 0.0
    drift_seed: int = 0
    max_tokens: int | None = None
    halves: str = "none"
    _pool: list[IntArray] = field(init=False, repr=False)
    _codes: dict[str, int] = field(init=False, repr=False)
    _drift: list[float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.halves not in ("none", "alternate"):
            raise ConfigError(f"halves must be 'none' or 'alternate', got {self.halves!r}")
        if self.drift_sigma_log < 0:
            raise ConfigError("drift_sigma_log must be >= 0")
        self._pool = self.trace.samples_by_prompt()
        if self.halves == "alternate" and min(p.size for p in self._pool) < 2:
            raise TraceError(f"{self.trace.source}: split halves need >= 2 samples per prompt")
        self._codes = {p: i for i, p in enumerate(self.trace.prompt_names)}
        self._drift = [0.0]

    def prompt_ids(self) -> tuple[str, ...]:
        """Prompts in order of first appearance in the trace."""
        return self.trace.prompt_names

    def drift_log(self, step: int) -> float:
        """Global log-length offset of ``step`` (0 at step 0)."""
        if self.drift_sigma_log == 0:
            return 0.0
        while len(self._drift) <= step:
            k = len(self._drift)
            inc = np.random.default_rng([self.drift_seed, k]).normal(0.0, self.drift_sigma_log)
            self._drift.append(self._drift[-1] + float(inc))
        return self._drift[step]

    def group_lengths(
        self, prompt_id: str, step: int, n: int, rng: np.random.Generator
    ) -> IntArray:
        """``n`` lengths resampled from the prompt's recorded samples (see class doc)."""
        _check_n(n)
        if step < 0:
            raise ConfigError(f"step must be >= 0, got {step}")
        code = self._codes.get(prompt_id)
        if code is None:
            raise TraceError(f"{self.trace.source}: unknown prompt {prompt_id!r}")
        pool = self._pool[code]
        if self.halves == "alternate":
            half = pool.size // 2
            pool = pool[:half] if step % 2 == 0 else pool[half:]
        out = pool[rng.integers(0, pool.size, size=n)]
        if self.drift_sigma_log > 0:
            out = np.rint(out * np.exp(self.drift_log(step))).astype(np.int64)
            if self.max_tokens is not None:
                out = np.minimum(out, self.max_tokens)
        return out.astype(np.int64)

    lengths = group_lengths
