"""What a rollout speedup buys a whole training step (Amdahl's law).

A synchronous RL step runs the rollout, then everything else (rewards, log-probs, the update,
the weight sync). Only the rollout gets faster when the routing gets better, so a rollout
``r`` times faster shortens a step whose rollout takes the share ``s`` of it ``1 / ((1 - s) +
s / r)`` times: llm-d's verl benchmark cut the rollout by 31% and the step by 4.7%, a share of
about 0.15. ``DEFAULT_ROLLOUT_SHARE`` (0.7) is the share verl reports for DAPO on a 32B model
and RollPacker measures for synchronous RL (docs/training-step.md names the sources); the reports
state the share they use, and ``--rollout-share`` sets it. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math

from tailsieve.errors import ConfigError

__all__ = ["DEFAULT_ROLLOUT_SHARE", "check_rollout_share", "measured_rollout_share",
           "step_speedup"]

DEFAULT_ROLLOUT_SHARE = 0.7
"""The rollout's share of a training step that reports assume unless told otherwise."""


def check_rollout_share(share: float) -> float:
    """``share`` as a float if it is in (0, 1]; a ``ConfigError`` naming it otherwise."""
    s = float(share)
    if not (0.0 < s <= 1.0):  # NaN fails too
        raise ConfigError(f"the rollout share of a training step must be in (0, 1], got {share!r}")
    return s


def step_speedup(rollout_speedup: float, rollout_share: float = DEFAULT_ROLLOUT_SHARE) -> float:
    """The training step's speedup when the rollout, ``rollout_share`` of the step, runs
    ``rollout_speedup`` times faster: ``1 / ((1 - share) + share / rollout_speedup)``. Equals
    the rollout speedup at share 1; lies between 1 and it otherwise (below 1 for a slower
    rollout)."""
    s = check_rollout_share(rollout_share)
    r = float(rollout_speedup)
    if not (r > 0.0 and math.isfinite(r)):
        raise ConfigError(f"a rollout speedup must be a positive finite number, got "
                          f"{rollout_speedup!r}")
    return 1.0 / ((1.0 - s) + s / r)


def measured_rollout_share(rollout_s: float, step_s: float) -> float | None:
    """The share of a step the rollout took, from timings such as verl's ``timing_s/gen``
    and ``timing_s/step``; None when they cannot give one (a non-positive or non-finite time,
    or a rollout longer than its step)."""
    try:
        g, t = float(rollout_s), float(step_s)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(g) and math.isfinite(t) and 0.0 < g <= t):
        return None
    return g / t
