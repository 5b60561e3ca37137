"""The rollout steps verl never announces, timed for the session gateway's balance gate.

verl's router protocol has no step call, but every server answer carries the weight version it
was generated with (``global_steps``). The turns between two versions are one step: when a new
version shows up, the step that ended is timed (first turn start to last turn end) and its
trajectories priced by the agentic simulator's yardstick (``sim.agentic.run.yardstick_s``:
the step's own work as time, the same for steps with and without moves, so its error cancels).
The gate compares the two and decides whether the next step moves. The record is pure: callers
pass ``now_s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.yardstick import yardstick_s
from tailsieve.workload.turns import Trajectory, Turn


@dataclass(slots=True)
class _Trajectory:
    outputs: list[int] = field(default_factory=list)  # output tokens per turn
    tools_s: list[float] = field(default_factory=list)  # gap before each later turn
    last_end_s: float | None = None


class StepRecord:
    """The turns of the current step (see the module docstring)."""

    def __init__(self) -> None:
        self._trajs: dict[str, _Trajectory] = {}
        self._start_s: float | None = None
        self._end_s: float | None = None

    def turn_started(self, key: str, now_s: float) -> None:
        if self._start_s is None:
            self._start_s = now_s
        t = self._trajs.get(key)
        if t is not None and t.last_end_s is not None:
            t.tools_s.append(max(0.0, now_s - t.last_end_s))
            t.last_end_s = None

    def turn_ended(self, key: str, output_tokens: int, now_s: float) -> None:
        t = self._trajs.setdefault(key, _Trajectory())
        if len(t.tools_s) < len(t.outputs):  # started in the previous step: no gap known
            t.tools_s.append(0.0)
        t.outputs.append(max(1, output_tokens))
        t.last_end_s = now_s
        self._end_s = now_s

    @property
    def observed_s(self) -> float:
        """First turn start to last turn end (0 before a turn ended)."""
        if self._start_s is None or self._end_s is None:
            return 0.0
        return max(0.0, self._end_s - self._start_s)

    def trajectories(self) -> list[Trajectory]:
        out = []
        for key, t in self._trajs.items():
            turns = [Turn(n, t.tools_s[i] if i < len(t.outputs) - 1 else 0.0)
                     for i, n in enumerate(t.outputs)]
            out.append(Trajectory(key, 0, 1, tuple(turns)))
        return out

    def predicted_s(self, configs: Sequence[ReplicaConfig]) -> float:
        """The yardstick's time for the step's trajectories (0 without any)."""
        trajs = self.trajectories()
        return yardstick_s(trajs, configs) if trajs else 0.0

    def forget(self, key: str) -> None:
        """A session ended (its turns stay out of the step: keeps the record bounded when the
        servers report no weight version)."""
        self._trajs.pop(key, None)

    def reset(self) -> None:
        self._trajs.clear()
        self._start_s = self._end_s = None
