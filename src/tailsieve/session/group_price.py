"""Co-locate or spread a GRPO group, by price (pure).

A group's trajectories share their prompt. Sending a sibling's first turn where another
sibling already went saves that prompt's prefill: the replica holds it once the first
sibling's prefill ran (the prefix cache model's ``cached_tokens``; llm-d's burst mode
co-locates whole groups for it). But siblings correlate: a group whose prompt is hard runs
long on every trajectory, so siblings stacked on one replica stack the step's tail there.
``place_turn`` prices both at a first turn: the prefill the cache saves is in its score, and
``stack_s`` adds what a sibling costs on a replica already running ``n`` of its group.

The model: replica ``r`` runs ``b`` sessions whose work is alike with coefficient of
variation ``cv``; a share ``rho`` of a trajectory's variance is its group's
(``SessionSettings.group_share``, as ``session.remaining``'s). The replica's remaining time
is about the horizon ``H`` times its load over the mean, so its relative variance is
``(b + 2 rho P) cv^2 / b^2`` with ``P`` the pairs of siblings on it. One more sibling beside
``n`` adds ``2 n rho cv^2`` to the variance's numerator, which raises the replica's standard
deviation by about ``H n rho cv / b^1.5`` over placing it among strangers; the step's time is
a maximum over ``R`` replicas, about ``z = sqrt(2 ln R)`` standard deviations above the mean,
so stacking costs ``z H n rho cv / b^1.5`` seconds. Where the prompt is long and the step
short (prefill-heavy groups), the saving wins and siblings co-locate; where trajectories run
long (agentic steps), the tail wins and siblings spread. No future length is read.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError

__all__ = ["GroupPlacements", "stack_s"]

FloatArray = npt.NDArray[np.float64]


def stack_s(siblings: FloatArray, batch: FloatArray, horizon_s: float, num_replicas: int,
            group_share: float, work_cv: float) -> FloatArray:
    """Seconds the step's tail grows by when one more sibling joins ``siblings[r]`` of its
    group on replica ``r`` running ``batch[r]`` sessions with it (see the module docstring);
    0 where no sibling is there or with one replica."""
    if num_replicas < 1 or horizon_s < 0 or not 0 <= group_share <= 1 or work_cv < 0:
        raise ConfigError("stack_s needs num_replicas >= 1, horizon_s >= 0, group_share in "
                          "[0, 1] and work_cv >= 0")
    z = math.sqrt(2.0 * math.log(num_replicas))
    b = np.maximum(batch, 1.0)
    return z * horizon_s * group_share * work_cv * np.maximum(siblings, 0.0) / b ** 1.5


class GroupPlacements:
    """Where each group's running siblings are (a router's own record of its decisions)."""

    def __init__(self) -> None:
        self._where: dict[Hashable, tuple[Hashable, int]] = {}  # session -> (group, replica)
        self._count: dict[Hashable, dict[int, int]] = {}  # group -> replica -> siblings

    def siblings(self, group: Hashable | None) -> Mapping[int, int]:
        """Replica -> the group's running siblings there (empty for no group)."""
        return self._count.get(group, {}) if group is not None else {}

    def placed(self, session: Hashable, group: Hashable | None, replica: int) -> None:
        """``session``'s turn runs on ``replica`` now (idempotent; a move updates it)."""
        if group is None:
            return
        self.ended(session)
        self._where[session] = (group, replica)
        got = self._count.setdefault(group, {})
        got[replica] = got.get(replica, 0) + 1

    def ended(self, session: Hashable) -> None:
        """``session`` ended (unknown ones: nothing)."""
        got = self._where.pop(session, None)
        if got is None:
            return
        group, replica = got
        counts = self._count[group]
        counts[replica] -= 1
        if counts[replica] <= 0:
            del counts[replica]
        if not counts:
            del self._count[group]
