"""Replay a turn trace's step on live replicas: its prompts, forced turn lengths and tools.

Each trajectory of the step runs as recorded: its prompt is ``prompt_tokens`` ids of its own
(random ids of the vocabulary, seeded per group; shared by its group), turn ``t`` is forced to ``output_tokens`` tokens (``max_tokens`` =
``min_tokens`` = the length, ``ignore_eos``), and its tool waits ``tool_s`` seconds (times
``time_scale``) and appends ``tool_output_tokens`` random ids (seeded per trajectory and
turn), until the last turn. So
``AgenticRollout(...).run(replay.prompts(), replay.tool)`` with
``AgenticConfig(turn_sampling=replay.sampling, group_size=replay.group_size,
max_turns=replay.max_turns)`` runs the simulator's workload on real or emulated servers, and
the batch's ``turn_trace()`` has the trace's turns (its tool seconds as measured).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.sessions.trajectory import ToolCall, ToolResult
from tailsieve.workload.turns import Trajectory

FIRST_ID = 1_000  # ids are drawn from FIRST_ID .. vocab_size - 1 (clear of special tokens)


class TurnReplay:
    """One step of trajectories to replay (every group with the same number of samples)."""

    def __init__(self, trajectories: Sequence[Trajectory], time_scale: float = 1.0,
                 temperature: float | None = 1.0, vocab_size: int = 32_000,
                 seed: int = 0) -> None:
        if not trajectories:
            raise ConfigError("nothing to replay: no trajectories")
        if not time_scale >= 0:
            raise ConfigError(f"time_scale must be >= 0, got {time_scale}")
        if vocab_size <= FIRST_ID:
            raise ConfigError(f"vocab_size must exceed {FIRST_ID}, got {vocab_size}")
        self.vocab_size, self.seed = vocab_size, seed
        self._by_key = {(t.prompt_id, t.sample): t for t in trajectories}
        self._groups = list(dict.fromkeys(t.prompt_id for t in trajectories))
        sizes = {pid: sum(1 for t in trajectories if t.prompt_id == pid) for pid in self._groups}
        if len(set(sizes.values())) != 1:
            raise ConfigError(f"groups of different sizes cannot be replayed together: {sizes}")
        self.group_size = next(iter(sizes.values()))
        for pid in self._groups:
            if {(pid, i) for i in range(self.group_size)} - set(self._by_key):
                raise ConfigError(f"group {pid!r}: samples must be 0..{self.group_size - 1}")
        self.max_turns = max(t.num_turns for t in trajectories)
        self.time_scale = time_scale
        self.temperature = temperature

    def prompts(self) -> list[PromptInput]:
        """One token-id prompt per group, of its recorded length (at least one token)."""
        out = []
        for g, pid in enumerate(self._groups):
            n = max(1, self._by_key[(pid, 0)].prompt_tokens)
            out.append(PromptInput(pid, token_ids=self._ids(n, g)))
        return out

    def _ids(self, n: int, *key: int) -> tuple[int, ...]:
        rng = np.random.default_rng([self.seed, *key])
        return tuple(int(x) for x in rng.integers(FIRST_ID, self.vocab_size, n))

    def sampling(self, prompt_id: str, sample: int, turn: int) -> SamplingParams:
        """Turn ``turn``'s forced length."""
        n = self._by_key[(prompt_id, sample)].turns[turn].output_tokens
        return SamplingParams(max_tokens=n, temperature=self.temperature,
                              extra={"ignore_eos": True, "min_tokens": n})

    async def tool(self, call: ToolCall) -> ToolResult:
        """The recorded tool call after ``call.turn``: its wait and its tokens."""
        traj = self._by_key[(call.prompt_id, call.sample)]
        if call.turn + 1 >= traj.num_turns:
            return ToolResult(done=True)
        turn = traj.turns[call.turn]
        if turn.tool_s > 0 and self.time_scale > 0:
            await asyncio.sleep(turn.tool_s * self.time_scale)
        g = self._groups.index(call.prompt_id)
        return ToolResult(observation_ids=self._ids(turn.tool_output_tokens, g, call.sample,
                                                    call.turn + 1))
