"""Which steps are steady, and the per-step ratios paired over them (``sim.speedup_stats``
builds its statistics on these; ``sim.records`` summarises runs with them)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["STEADY_FROM", "STEADY_STEPS", "ratios_by_step"]

STEADY_FROM = 5  # first steady step: warm-up (step 0) + 4 steps for the controller to settle
STEADY_STEPS = 3  # steady step time = mean of the last three regular steps (paper 4.2)


def ratios_by_step(
    uniform: Mapping[int, float], policy: Mapping[int, float], steady_from: int = STEADY_FROM
) -> dict[int, float]:
    """``uniform[t] / policy[t]`` for every step ``t >= steady_from`` both map (step -> step
    time of a regular step); the live demo passes its measured step times."""
    return {
        t: uniform[t] / v for t, v in sorted(policy.items())
        if t >= steady_from and t in uniform and v > 0
    }
