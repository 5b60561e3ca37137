"""The multi-turn workload generator behind the agentic presets (``workload.agentic_presets``).

A preset draws, per group (prompt), a prompt length shared by its ``n`` samples; per trajectory
a number of turns and an output-length level; per turn an output length (long-tailed), and per
tool call a latency and an output size. Turn counts and output levels are correlated within a
group: each is driven by ``sqrt(rho) * z_group + sqrt(1 - rho) * z_sample`` (standard normals)
with ``rho = group_correlation``, so ``rho`` is the share of their log variance that a group's
samples have in common (the prompt effect). A context cap ends a trajectory: a turn that would
pass it is truncated there (``finish_reason`` ``"length"``), and a tool output that leaves no
room for another turn ends the trajectory at that turn. Otherwise a trajectory ends after its
drawn number of turns (``"stop"``).

Every number and its source: ``docs/workloads.md`` ("Multi-turn workloads"). Generation is
seeded and deterministic: the same preset, sizes and seed give the same ``TurnTrace``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.workload.turns import Trajectory, Turn, TurnTrace

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class LogNormal:
    """``median * exp(sigma_log * z)`` for a standard normal ``z``, clipped to ``[low, high]``."""

    median: float  # the median (before clipping), in the quantity's unit
    sigma_log: float  # standard deviation of the natural log
    low: float  # smallest value
    high: float  # largest value

    def __post_init__(self) -> None:
        vals = (self.median, self.sigma_log, self.low, self.high)
        if not all(math.isfinite(v) for v in vals):
            raise ConfigError(f"LogNormal values must be finite, got {vals}")
        if self.sigma_log < 0 or not 0 <= self.low <= self.median <= self.high or self.median <= 0:
            raise ConfigError(
                f"LogNormal needs sigma_log >= 0 and 0 <= low <= median <= high with median > 0, "
                f"got median {self.median}, sigma_log {self.sigma_log}, low {self.low}, "
                f"high {self.high}"
            )

    def draw(self, z: FloatArray) -> FloatArray:
        """The values for standard normals ``z`` (any shape)."""
        return np.clip(self.median * np.exp(self.sigma_log * z), self.low, self.high)


@dataclass(frozen=True, slots=True)
class AgenticPreset:
    """A calibrated multi-turn workload (see the module doc)."""

    name: str
    description: str  # one line: what it models
    source: str  # one line: the published statistics it follows (full table in the docs)
    prompt_tokens: LogNormal  # per group: the shared prompt prefix, tokens
    num_turns: LogNormal  # per trajectory: turns (rounded; low >= 1)
    output_tokens: LogNormal  # per turn: generated tokens (sigma_log: turn-to-turn spread;
    #   high: one turn's max_tokens)
    trajectory_sigma_log: float  # per trajectory: spread of its log output level
    tool_output_tokens: LogNormal  # per tool call: tokens appended to the context
    tool_s: LogNormal  # per tool call: wall-clock seconds
    max_context_tokens: int  # the context cap (prompt + outputs + tool outputs)
    group_correlation: float = 0.6  # rho in [0, 1]: within-group share of the log variance of
    #   turn counts and output levels

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("AgenticPreset needs a name")
        if not 0 <= self.group_correlation <= 1:
            raise ConfigError(f"{self.name}: group_correlation must be in [0, 1], got "
                              f"{self.group_correlation}")
        if not (math.isfinite(self.trajectory_sigma_log) and self.trajectory_sigma_log >= 0):
            raise ConfigError(f"{self.name}: trajectory_sigma_log must be >= 0, got "
                              f"{self.trajectory_sigma_log}")
        if self.num_turns.low < 1 or self.output_tokens.low < 1:
            raise ConfigError(f"{self.name}: num_turns and output_tokens need low >= 1")
        if self.tool_s.low < 0 or self.tool_output_tokens.low < 0:
            raise ConfigError(f"{self.name}: tool_s and tool_output_tokens need low >= 0")
        if self.max_context_tokens <= self.prompt_tokens.high:
            raise ConfigError(
                f"{self.name}: max_context_tokens {self.max_context_tokens} must exceed the "
                f"largest prompt ({self.prompt_tokens.high:g} tokens)"
            )

    def generate(
        self,
        num_groups: int,
        group_size: int,
        num_steps: int = 1,
        rng: np.random.Generator | int = 0,
        *,
        group_correlation: float | None = None,
        max_context_tokens: int | None = None,
    ) -> TurnTrace:
        """``num_steps`` steps of ``num_groups`` fresh prompts x ``group_size`` trajectories.

        ``rng`` is a generator or a seed; ``group_correlation`` and ``max_context_tokens``
        override the preset's. Prompt ids are ``s<step>-g<group>``; samples 0 .. n-1."""
        for name, v in (("num_groups", num_groups), ("group_size", group_size),
                        ("num_steps", num_steps)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
        p = self
        if group_correlation is not None or max_context_tokens is not None:
            p = replace(
                self,
                group_correlation=self.group_correlation if group_correlation is None
                else group_correlation,
                max_context_tokens=self.max_context_tokens if max_context_tokens is None
                else max_context_tokens,
            )
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        return TurnTrace(tuple(p._draw(num_groups, group_size, num_steps, gen)))

    def _draw(self, num_groups: int, n: int, num_steps: int,
              rng: np.random.Generator) -> list[Trajectory]:
        num_g = num_groups * num_steps
        num_t = num_g * n
        max_turns = int(self.num_turns.high)
        z_prompt = rng.standard_normal(num_g)
        z_group = rng.standard_normal((2, num_g))
        z_sample = rng.standard_normal((2, num_t))
        e_out = rng.standard_normal((num_t, max_turns))
        e_tool_s = rng.standard_normal((num_t, max_turns))
        e_tool_out = rng.standard_normal((num_t, max_turns))
        rho = self.group_correlation
        u = math.sqrt(rho) * np.repeat(z_group, n, axis=1) + math.sqrt(1 - rho) * z_sample
        prompt = np.rint(self.prompt_tokens.draw(z_prompt)).astype(np.int64)
        turns = np.rint(self.num_turns.draw(u[0])).astype(np.int64)
        out_z = (self.trajectory_sigma_log * u[1])[:, None] + self.output_tokens.sigma_log * e_out
        o = self.output_tokens
        outs = np.rint(np.clip(o.median * np.exp(out_z), o.low, o.high)).astype(np.int64)
        tool_s = self.tool_s.draw(e_tool_s)
        tool_out = np.rint(self.tool_output_tokens.draw(e_tool_out)).astype(np.int64)
        trajs: list[Trajectory] = []
        for i in range(num_t):
            g = i // n
            k = int(turns[i])
            cut, finish = _cut_at_cap(int(prompt[g]), outs[i, :k].tolist(),
                                      tool_s[i, :k].tolist(), tool_out[i, :k].tolist(),
                                      self.max_context_tokens)
            step, group = divmod(g, num_groups)
            trajs.append(Trajectory(f"s{step}-g{group}", i % n, int(prompt[g]), cut, step, finish))
        return trajs


def _cut_at_cap(
    prompt: int, outs: list[int], tool_s: list[float], tool_out: list[int], cap: int
) -> tuple[tuple[Turn, ...], str]:
    """The turns that fit in ``cap`` context tokens, and the finish reason."""
    ctx = prompt
    turns: list[Turn] = []
    last = len(outs) - 1
    for t, out in enumerate(outs):
        if ctx + out >= cap:
            turns.append(Turn(cap - ctx))
            return tuple(turns), "length"
        if t == last:
            turns.append(Turn(out))
            return tuple(turns), "stop"
        if ctx + out + tool_out[t] + 1 > cap:
            turns.append(Turn(out))
            return tuple(turns), "length"
        turns.append(Turn(out, tool_s[t], tool_out[t]))
        ctx += out + tool_out[t]
    raise AssertionError("unreachable: a trajectory has at least one turn")
