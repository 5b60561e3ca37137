"""Replay mode: force each response's length from a trace so real engines, the emulator and the
simulator run exactly the same work (vLLM: ``max_tokens = L`` with ``ignore_eos``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tailsieve.errors import ConfigError, TraceError
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.workload.io import read_trace
from tailsieve.workload.trace import Trace


@dataclass(frozen=True, slots=True)
class ReplayLengths:
    """Forced length per (prompt_id, sample), scaled: ``max(min_tokens, min(max_tokens,
    round(L * length_scale)))``. Callable as the executor's ``forced_length``."""

    lengths: dict[str, tuple[int, ...]]  # prompt_id -> raw length of each sample
    length_scale: float = 1.0
    min_tokens: int = 1
    max_tokens: int | None = None  # clip (keep prompt + max_tokens <= the server's context)

    def __post_init__(self) -> None:
        if not (self.length_scale > 0 and math.isfinite(self.length_scale)):
            raise ConfigError(f"length_scale must be > 0, got {self.length_scale}")
        if self.min_tokens < 1:
            raise ConfigError(f"min_tokens must be >= 1, got {self.min_tokens}")

    @classmethod
    def from_trace(
        cls,
        trace: Trace,
        length_scale: float = 1.0,
        min_tokens: int = 1,
        max_tokens: int | None = None,
        step: int | None = None,
    ) -> ReplayLengths:
        """One checkpoint of a trace (``step``; default the first one present)."""
        steps = trace.step
        pick = int(steps.min()) if step is None else step
        out: dict[str, dict[int, int]] = {}
        names = trace.prompt_names
        for code, st, smp, L in zip(
            trace.prompt_codes.tolist(),
            steps.tolist(),
            trace.sample.tolist(),
            trace.response_tokens.tolist(),
            strict=True,
        ):
            if st == pick:
                out.setdefault(names[code], {})[int(smp)] = int(L)
        if not out:
            raise TraceError(f"{trace.source}: no rows for step {pick}")
        lengths = {p: tuple(v[k] for k in sorted(v)) for p, v in out.items()}
        return cls(lengths, length_scale, min_tokens, max_tokens)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: float | int | None) -> ReplayLengths:
        return cls.from_trace(read_trace(path), **kwargs)  # type: ignore[arg-type]

    def __call__(self, prompt_id: str, sample: int) -> int:
        try:
            row = self.lengths[prompt_id]
        except KeyError:
            raise ConfigError(f"replay: prompt {prompt_id!r} is not in the trace") from None
        raw = row[sample % len(row)]
        n = max(self.min_tokens, round(raw * self.length_scale))
        return min(n, self.max_tokens) if self.max_tokens is not None else n

    def prompts(self) -> list[PromptInput]:
        """One prompt per trace prompt id, in trace order, its text the id itself (in replay
        mode the work is set by the forced lengths, not by the prompt)."""
        return [PromptInput(pid, text=pid) for pid in self.lengths]
