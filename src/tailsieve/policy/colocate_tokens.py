"""Group co-location balanced by tokens: llm-d's RL burst mode for one-shot steps. Never reads
output lengths."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.throughput import ThroughputModel
from tailsieve.policy.base import RoutingPolicy, check_replicas, group_sizes
from tailsieve.policy.routing import Routing
from tailsieve.session.colocate import plan_window


class ColocateTokensPolicy(RoutingPolicy):
    """Each group whole on one replica, as llm-d's burst prefix-cache producer places a window
    of GRPO groups with ``balanceBy: tokens`` (``session.colocate.plan_window``): groups in
    order, each on the replica of least prompt-token load with room under the fair-share cap
    (a group that fits nowhere whole is split). Unlike ``uniform`` (groups dealt by count),
    two long-prompt groups do not share a replica while another holds short ones. Without
    prompt sizes every group weighs the same and the placement balances counts."""

    name = "colocate-tokens"
    uses_lengths = False

    def route(self, groups: Sequence[npt.ArrayLike], num_replicas: int,
              model: ThroughputModel, prompt_tokens: Sequence[int] | None = None) -> Routing:
        """``prompt_tokens``: each group's prompt size (None: all equal)."""
        check_replicas(num_replicas)
        sizes = group_sizes(groups)  # sizes only: this policy must not see lengths
        if prompt_tokens is not None and len(prompt_tokens) != len(sizes):
            raise ConfigError(f"prompt_tokens has {len(prompt_tokens)} entries for "
                              f"{len(sizes)} groups")
        ptoks = [1] * len(sizes) if prompt_tokens is None else [int(p) for p in prompt_tokens]
        window = [((g, s), g, ptoks[g]) for g, n in enumerate(sizes) for s in range(n)]
        plan, _ = plan_window(window, list(range(num_replicas)))
        parts = tuple(np.array([plan[(g, s)] for s in range(n)], dtype=np.int64)
                      for g, n in enumerate(sizes))
        return Routing(parts, num_replicas, self.name)
