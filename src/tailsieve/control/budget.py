"""How many prompts a run of S steps draws: the count a finite prompt source must hold.

Every step delivers N groups. Besides the N it needs, a TailSieve step launches ``c`` *extra*
fresh groups (the controller's ``num_extra``, equal to its tail size q): the first N to finish
are delivered, and the c still running at the cutoff are aborted and *carried* into the next
step, where they are delivered ahead of fresh prompts. So step t draws ``N - c_{t-1} + c_t``
fresh prompts, and S steps draw ``S * N + c_{S-1}`` in all: the N per step plus the extras of
the last step (delivered by the flush step). ``c_{S-1}`` depends on what the controller decides
during the run, so a source is sure to last only with ``S * N + max_extra_groups(...)``
prompts, which is what ``prompts_needed`` returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import ControllerName
from tailsieve.control.static import StaticController
from tailsieve.errors import ConfigError


def max_extra_groups(policy: str, config: ControllerConfig) -> int:
    """The most extra fresh groups any step of ``policy`` can launch with ``config``.

    ``uniform``: 0. ``tailsieve-static``: its held q (0 when m0 = 0). ``tailsieve`` and
    ``tailsieve-fixed``: q is bounded by ``q_max`` (default N // 2), by the initial ``q0`` and
    by the smallest q a split may have (``min_groups_per_tail_replica * m``, m <= R - 1), and
    never exceeds N - 1; with one replica there is no tail pool and no extra group."""
    key = ControllerName(policy)
    n, r = config.num_groups, config.num_replicas
    if key is ControllerName.UNIFORM:
        return 0
    if key is ControllerName.TAILSIEVE_STATIC:
        if config.m0 is None:
            raise ConfigError("tailsieve-static needs m0 (and q0): the split it holds")
        return StaticController(config.q_start, config.m0, n, r).num_extra
    if r < 2 or n < 2:
        return 0
    return min(n - 1, max(config.q_cap, config.q_start, config.q_floor(r - 1)))


@dataclass(frozen=True, slots=True)
class PromptBudget:
    """Prompts a run of ``num_steps`` steps draws at most: ``num_steps * num_groups`` delivered
    in the steps plus up to ``max_extra`` carried into the flush step."""

    num_steps: int
    num_groups: int
    max_extra: int

    @property
    def num_delivered(self) -> int:
        return self.num_steps * self.num_groups

    @property
    def num_needed(self) -> int:
        return self.num_delivered + self.max_extra


def prompts_needed(policy: str, config: ControllerConfig, num_steps: int) -> PromptBudget:
    """The ``PromptBudget`` of ``num_steps`` steps of ``policy`` (see the module docstring)."""
    if num_steps < 0:
        raise ConfigError(f"steps must be >= 0, got {num_steps}")
    return PromptBudget(num_steps, config.num_groups, max_extra_groups(policy, config))
