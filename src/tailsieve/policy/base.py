"""The interface every routing policy implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError, TraceError
from tailsieve.model.throughput import ThroughputModel
from tailsieve.policy.routing import Routing

FloatArray = npt.NDArray[np.float64]


class RoutingPolicy(ABC):
    """Maps response groups onto replicas.

    ``route`` receives one array of response lengths (tokens) per group. Policies with
    ``uses_lengths = False`` must only look at the group sizes; oracle policies
    (``uses_lengths = True``) are the only code allowed to read realised lengths.
    """

    name: str = "abstract"
    uses_lengths: bool = False

    @abstractmethod
    def route(
        self, groups: Sequence[npt.ArrayLike], num_replicas: int, model: ThroughputModel
    ) -> Routing:
        """Assign every response ``(group, sample)`` to a replica in ``0..num_replicas-1``."""


def check_replicas(num_replicas: int) -> None:
    """Reject a non-positive replica count."""
    if num_replicas < 1:
        raise ConfigError(f"num_replicas must be >= 1, got {num_replicas}")


def group_sizes(groups: Sequence[npt.ArrayLike]) -> list[int]:
    """Number of responses in each group (reads sizes only, never values)."""
    return [int(np.size(g)) for g in groups]


def flat_lengths(groups: Sequence[npt.ArrayLike]) -> FloatArray:
    """All response lengths, groups concatenated; rejects negative or non-finite values."""
    parts = [np.asarray(g, dtype=np.float64).ravel() for g in groups]
    flat = np.concatenate([*parts, np.zeros(0)])
    bad = np.flatnonzero(~np.isfinite(flat) | (flat < 0))
    if bad.size:
        raise TraceError(f"response {int(bad[0])}: length must be finite and >= 0")
    return flat


def greedy_by_time(
    lengths: FloatArray, replicas: Sequence[int], model: ThroughputModel
) -> dict[int, int]:
    """Longest-first: each request to the replica (among ``replicas``) whose predicted
    all-admit time after adding it is smallest. Returns ``{request index: replica}``.

    Longest-first makes the increment exact: ``L * (tau(c+1) - tau(c))`` plus, under the
    context term, the request's own ``k * L^2 / 2``."""
    out: dict[int, int] = {}
    if not replicas:
        return out
    marg = np.diff(model.taus(lengths.size + 1))
    reps = list(replicas)
    times = np.zeros(len(reps))
    counts = np.zeros(len(reps), dtype=np.int64)
    own = model.context_s_per_token * lengths * lengths / 2.0
    for i in np.argsort(-lengths, kind="stable").tolist():
        after = times + lengths[i] * marg[counts] + own[i]
        j = int(np.argmin(after))
        times[j] = after[j]
        counts[j] += 1
        out[i] = reps[j]
    return out
