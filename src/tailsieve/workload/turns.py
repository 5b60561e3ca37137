"""Multi-turn trajectories: the workload of agentic rollouts.

A trajectory alternates generation and tool calls. At turn ``t`` the server prefills the part
of the context ``C_t`` it does not hold and decodes ``O_t`` tokens; a tool then takes ``D_t``
wall-clock seconds and appends ``T_t`` tokens, so ``C_{t+1} = C_t + O_t + T_t`` with ``C_0``
the prompt. After the last turn there is no tool call. A group's trajectories (GRPO's ``n``
samples of one prompt) share the prompt prefix.

``Turn``, ``Trajectory`` and ``TurnTrace`` are plain validated values: every bad field raises a
``TraceError`` naming the trajectory and the field. Files: ``workload.turn_io``; generated
workloads: ``workload.agentic_presets``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from tailsieve.errors import TraceError


def _int(owner: str, name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TraceError(f"{owner}: field '{name}': expected an integer, got {value!r}")
    if value < low:
        raise TraceError(f"{owner}: field '{name}': must be >= {low}, got {int(value)}")
    return int(value)


@dataclass(frozen=True, slots=True)
class Turn:
    """One generation and the tool call after it."""

    output_tokens: int  # tokens the model generates in this turn (>= 1)
    tool_s: float = 0.0  # wall-clock seconds of the tool call after it (0 after the last turn)
    tool_output_tokens: int = 0  # tokens the tool appends to the context (0 after the last)

    def __post_init__(self) -> None:
        object.__setattr__(self, "output_tokens", _int("Turn", "output_tokens",
                                                       self.output_tokens, 1))
        object.__setattr__(self, "tool_output_tokens", _int("Turn", "tool_output_tokens",
                                                            self.tool_output_tokens, 0))
        t = self.tool_s
        if isinstance(t, bool) or not isinstance(t, Real) or not math.isfinite(t) or t < 0:
            raise TraceError(f"Turn: field 'tool_s': must be a finite number >= 0, got {t!r}")
        object.__setattr__(self, "tool_s", float(t))

    @property
    def has_tool(self) -> bool:
        """True when a tool call follows this turn."""
        return self.tool_s > 0 or self.tool_output_tokens > 0


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One sampled trajectory of a prompt: its turns and where it sits in the trace."""

    prompt_id: str  # the group (prompt) it belongs to
    sample: int  # index within its group (0 .. n-1)
    prompt_tokens: int  # the shared prompt prefix of its group (0: unknown)
    turns: tuple[Turn, ...]  # >= 1 turn; a single-turn trace row is a one-turn trajectory
    step: int = 0  # rollout step (policy checkpoint)
    finish_reason: str | None = None  # how its last turn ended (e.g. "stop", "length")

    def __post_init__(self) -> None:
        if not isinstance(self.prompt_id, str) or not self.prompt_id:
            raise TraceError(f"Trajectory: field 'prompt_id': expected a non-empty string, "
                             f"got {self.prompt_id!r}")
        who = f"trajectory ({self.prompt_id!r}, step {self.step!r}, sample {self.sample!r})"
        for name in ("sample", "prompt_tokens", "step"):
            object.__setattr__(self, name, _int(who, name, getattr(self, name), 0))
        turns = tuple(self.turns) if isinstance(self.turns, Sequence) else self.turns
        if not isinstance(turns, tuple) or not turns:
            raise TraceError(f"{who}: field 'turns': expected at least one Turn")
        bad = next((i for i, t in enumerate(turns) if not isinstance(t, Turn)), None)
        if bad is not None:
            raise TraceError(f"{who}: field 'turns': turn {bad} is not a Turn: {turns[bad]!r:.60}")
        if turns[-1].has_tool:
            raise TraceError(f"{who}: field 'turns': the last turn has a tool call "
                             "(tool_s and tool_output_tokens must be 0 after the last turn)")
        object.__setattr__(self, "turns", turns)
        fr = self.finish_reason
        if fr is not None and (not isinstance(fr, str) or not fr):
            raise TraceError(f"{who}: field 'finish_reason': expected a non-empty string or "
                             f"None, got {fr!r}")

    @property
    def num_turns(self) -> int:
        """Number of turns (>= 1)."""
        return len(self.turns)

    @property
    def key(self) -> tuple[str, int, int]:
        """``(prompt_id, step, sample)``: unique within a trace."""
        return self.prompt_id, self.step, self.sample

    def context_at(self, t: int) -> int:
        """Context tokens when turn ``t`` starts: the prompt plus every earlier turn's output
        and tool output."""
        if not 0 <= t < len(self.turns):
            raise TraceError(f"trajectory {self.key}: no turn {t} (it has {len(self.turns)})")
        return self.prompt_tokens + sum(
            u.output_tokens + u.tool_output_tokens for u in self.turns[:t]
        )

    @property
    def final_context_tokens(self) -> int:
        """Context tokens when the trajectory ends (prompt, all outputs, all tool outputs)."""
        return self.prompt_tokens + self.output_tokens + self.tool_output_tokens

    @property
    def output_tokens(self) -> int:
        """Tokens the model generated over all turns."""
        return sum(u.output_tokens for u in self.turns)

    @property
    def tool_output_tokens(self) -> int:
        """Tokens the tools appended over all turns."""
        return sum(u.tool_output_tokens for u in self.turns)

    @property
    def tool_s(self) -> float:
        """Seconds spent in tool calls over all turns."""
        return sum(u.tool_s for u in self.turns)


@dataclass(frozen=True, slots=True)
class TurnTrace:
    """Trajectories of one or more rollout steps; ``(prompt_id, step, sample)`` unique."""

    trajectories: tuple[Trajectory, ...]

    def __post_init__(self) -> None:
        trajs = tuple(self.trajectories)
        if not trajs:
            raise TraceError("TurnTrace: field 'trajectories': no trajectories")
        seen: dict[tuple[str, int, int], int] = {}
        for i, tr in enumerate(trajs):
            if not isinstance(tr, Trajectory):
                raise TraceError(f"TurnTrace: trajectory {i}: not a Trajectory: {tr!r:.60}")
            first = seen.setdefault(tr.key, i)
            if first != i:
                raise TraceError(f"TurnTrace: trajectory {i}: field 'sample': duplicate "
                                 f"(prompt_id, step, sample) = {tr.key}, first at {first}")
        object.__setattr__(self, "trajectories", trajs)

    def __len__(self) -> int:
        return len(self.trajectories)

    def steps(self) -> list[int]:
        """The distinct steps, sorted."""
        return sorted({tr.step for tr in self.trajectories})

    def groups(self, step: int) -> list[tuple[Trajectory, ...]]:
        """The groups of ``step``: one tuple per prompt (in order of first appearance), its
        trajectories in sample order."""
        by_prompt: dict[str, list[Trajectory]] = {}
        for tr in self.trajectories:
            if tr.step == step:
                by_prompt.setdefault(tr.prompt_id, []).append(tr)
        return [tuple(sorted(g, key=lambda t: t.sample)) for g in by_prompt.values()]
