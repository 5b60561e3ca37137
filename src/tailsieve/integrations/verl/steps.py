"""The rollout steps verl never announces, timed for the session gateway's balance gate.

verl's router protocol has no step call, but every server answer carries the weight version it
was generated with (``global_steps``). The turns between two versions are one step: when a new
version shows up, the step that ended is timed (first turn start to last turn end) and its
trajectories priced by the agentic simulator's yardstick (``sim.agentic.run.yardstick_s``:
the step's own work as time, the same for steps with and without moves, so its error cancels).
The gate compares the two and decides whether the next step moves. The record is pure: callers
pass ``now_s``.

The record also times the training step around the rollout (``StepTiming``): between the last
turn of one step and the first turn of the next no turn runs, while verl trains, so the rollout
took ``rollout_s / (rollout_s + gap_s)`` of the step. With the balance gate's measure of what
moves buy a rollout (``gate_speedup``), the training step's speedup follows (Amdahl,
``core.training_step``). A trainer that reads verl's own ``timing_s/gen`` and ``timing_s/step``
gets the share from them instead (``verl_step_share``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tailsieve.core.training_step import measured_rollout_share, step_speedup
from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.yardstick import yardstick_s
from tailsieve.workload.turns import Trajectory, Turn


@dataclass(slots=True)
class _Trajectory:
    outputs: list[int] = field(default_factory=list)  # output tokens per turn
    tools_s: list[float] = field(default_factory=list)  # gap before each later turn
    last_end_s: float | None = None


@dataclass(frozen=True, slots=True)
class StepTiming:
    """One training step as the router saw it: its rollout, then no turn while verl trained."""

    rollout_s: float  # first turn start to last turn end of the step
    step_s: float  # rollout_s plus the gap before the next step's first turn
    rollout_share: float  # rollout_s / step_s, in (0, 1]
    rollout_speedup: float | None = None  # what moves bought the rollout (the balance gate)
    step_speedup: float | None = None  # the training step's speedup from it (Amdahl)

    def __post_init__(self) -> None:
        if not (0 < self.rollout_s <= self.step_s and math.isfinite(self.step_s)):
            raise ConfigError(f"a step timing needs 0 < rollout_s <= step_s, got "
                              f"{self.rollout_s} and {self.step_s}")
        if not (0 < self.rollout_share <= 1):
            raise ConfigError(f"rollout_share must be in (0, 1], got {self.rollout_share}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def words(self) -> str:
        """The log line: ``rollout 12.0 s of a 40.0 s training step (share 0.30); ...``."""
        out = (f"rollout {self.rollout_s:.1f} s of a {self.step_s:.1f} s training step "
               f"(rollout share {self.rollout_share:.2f})")
        if self.rollout_speedup is not None and self.step_speedup is not None:
            out += (f"; moves made the rollout {self.rollout_speedup:.3f}x (balance gate), "
                    f"the training step {self.step_speedup:.3f}x")
        return out


def gate_speedup(balanced: Sequence[float], round_robin: Sequence[float]) -> float | None:
    """What moves buy a rollout, as the balance gate measures it: the mean observed/predicted
    step time of steps without moves over that of steps with them (None until both ran)."""
    if not balanced or not round_robin:
        return None
    bal = sum(balanced) / len(balanced)
    rr = sum(round_robin) / len(round_robin)
    return rr / bal if bal > 0 and rr > 0 else None


def verl_step_share(metrics: Mapping[str, Any]) -> dict[str, float]:
    """TailSieve's metrics from verl's logged ``timing_s/gen`` (the rollout) and
    ``timing_s/step`` (the step around it): ``tailsieve/rollout_share`` and
    ``tailsieve/step_speedup_ceiling`` (the step's speedup were the rollout free:
    ``1 / (1 - share)``; absent at share 1); the step's speedup for a rollout speedup r is
    ``1 / ((1 - share) + share / r)``. Empty when either timing is missing or unusable."""
    share = measured_rollout_share(metrics.get("timing_s/gen", math.nan),
                                   metrics.get("timing_s/step", math.nan))
    if share is None:
        return {}
    out = {"tailsieve/rollout_share": share}
    if share < 1:
        out["tailsieve/step_speedup_ceiling"] = 1.0 / (1.0 - share)
    return out


class StepRecord:
    """The turns of the current step (see the module docstring)."""

    def __init__(self) -> None:
        self._trajs: dict[str, _Trajectory] = {}
        self._start_s: float | None = None
        self._end_s: float | None = None
        self._running = 0  # turns started and not yet ended or failed (kept across steps)
        self._busy_since_s: float | None = None  # when the running count last left 0

    def turn_started(self, key: str, now_s: float) -> None:
        if self._running == 0:
            self._busy_since_s = now_s
        self._running += 1
        if self._start_s is None:
            self._start_s = now_s
        t = self._trajs.get(key)
        if t is not None and t.last_end_s is not None:
            t.tools_s.append(max(0.0, now_s - t.last_end_s))
            t.last_end_s = None

    def turn_ended(self, key: str, output_tokens: int, now_s: float) -> None:
        self._running = max(0, self._running - 1)
        t = self._trajs.setdefault(key, _Trajectory())
        if len(t.tools_s) < len(t.outputs):  # started in the previous step: no gap known
            t.tools_s.append(0.0)
        t.outputs.append(max(1, output_tokens))
        t.last_end_s = now_s
        self._end_s = now_s

    def turn_failed(self) -> None:
        """A started turn raised instead of ending (it no longer runs)."""
        self._running = max(0, self._running - 1)

    def timing(self, rollout_speedup: float | None = None) -> StepTiming | None:
        """The step that just ended, timed against the gap before the next one's first turn
        (call it when the next step is known to run, before ``reset``); None without a gap
        (no turn ended, or none started after the last ended)."""
        start, end, busy = self._start_s, self._end_s, self._busy_since_s
        if start is None or end is None or busy is None or not busy > end > start:
            return None
        rollout, step = end - start, busy - start
        share = rollout / step
        speedup = None if rollout_speedup is None else step_speedup(rollout_speedup, share)
        return StepTiming(rollout, step, share, rollout_speedup, speedup)

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
