"""A routing decision: which replica runs each response of each group."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.replica_time import all_admit_time
from tailsieve.model.throughput import ThroughputModel

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Routing:
    """``replicas[g][s]`` is the replica (``0..num_replicas-1``) of sample ``s`` of group ``g``."""

    replicas: tuple[IntArray, ...]  # one array per group, one entry per response
    num_replicas: int  # replicas available (some may be left empty)
    policy: str = ""  # name of the policy that produced it

    def __post_init__(self) -> None:
        if self.num_replicas < 1:
            raise ConfigError(f"num_replicas must be >= 1, got {self.num_replicas}")
        for g, arr in enumerate(self.replicas):
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self.num_replicas):
                raise ConfigError(
                    f"group {g}: replica index out of range 0..{self.num_replicas - 1}"
                )

    @property
    def num_groups(self) -> int:
        return len(self.replicas)

    def replica_lengths(self, groups: Sequence[npt.ArrayLike]) -> list[FloatArray]:
        """Response lengths (tokens) routed to each replica."""
        self._check_shape(groups)
        flat_len = np.concatenate(
            [np.asarray(g, dtype=np.float64).ravel() for g in groups] + [np.zeros(0)]
        )
        flat_rep = np.concatenate([*self.replicas, np.zeros(0, dtype=np.int64)])
        return [flat_len[flat_rep == r] for r in range(self.num_replicas)]

    def replica_times_s(
        self, groups: Sequence[npt.ArrayLike], model: ThroughputModel
    ) -> FloatArray:
        """All-admit time of every replica, seconds (0 for an empty replica)."""
        return np.array([all_admit_time(ls, model) for ls in self.replica_lengths(groups)])

    def makespan_s(self, groups: Sequence[npt.ArrayLike], model: ThroughputModel) -> float:
        """Max replica all-admit time, seconds."""
        times = self.replica_times_s(groups, model)
        return float(times.max()) if times.size else 0.0

    def _check_shape(self, groups: Sequence[npt.ArrayLike]) -> None:
        if len(groups) != len(self.replicas):
            raise ConfigError(f"routing has {len(self.replicas)} groups, got {len(groups)}")
        for g, (ls, arr) in enumerate(zip(groups, self.replicas, strict=True)):
            if np.asarray(ls).size != arr.size:
                raise ConfigError(f"group {g}: routing has {arr.size} samples, lengths differ")


def routing_from_flat(
    flat_replicas: npt.ArrayLike, group_sizes: Sequence[int], num_replicas: int, policy: str
) -> Routing:
    """Build a ``Routing`` from one replica index per response, groups concatenated."""
    flat = np.asarray(flat_replicas, dtype=np.int64)
    bounds = np.cumsum([0, *group_sizes])
    parts = tuple(flat[bounds[i] : bounds[i + 1]].copy() for i in range(len(group_sizes)))
    return Routing(parts, num_replicas, policy)
