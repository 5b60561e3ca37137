"""llm-d's group co-location balanced by tokens, as a one-shot routing."""

from __future__ import annotations

import numpy as np
import pytest

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import builtin_profile
from tailsieve.policy.colocate_tokens import ColocateTokensPolicy
from tailsieve.policy.registry import get_policy
from tailsieve.policy.uniform import UniformPolicy

MODEL = builtin_profile("qwen3-4b-h100")


def test_groups_stay_whole_and_long_prompts_are_spread() -> None:
    groups = [np.full(4, 100 + g) for g in range(4)]
    # uniform deals groups by count: 0 and 2 share replica 0 whatever their prompts
    assert [int(p[0]) for p in UniformPolicy().route(groups, 2, MODEL).replicas] == [0, 1, 0, 1]
    routing = ColocateTokensPolicy().route(groups, 2, MODEL,
                                           prompt_tokens=[30000, 4000, 30000, 4000])
    for part in routing.replicas:
        assert len(set(part.tolist())) == 1  # each group whole
    reps = [int(p[0]) for p in routing.replicas]
    assert reps[0] != reps[2] and reps[1] != reps[3]


def test_it_never_reads_lengths_and_checks_prompts() -> None:
    a = get_policy("colocate-tokens").route([np.array([1, 2]), np.array([3, 4])], 2, MODEL)
    b = get_policy("colocate-tokens").route([np.array([9e4, 1]), np.array([3, 7e3])], 2, MODEL)
    assert [x.tolist() for x in a.replicas] == [x.tolist() for x in b.replicas]
    with pytest.raises(ConfigError, match="prompt_tokens"):
        ColocateTokensPolicy().route([np.array([1])], 2, MODEL, prompt_tokens=[1, 2])
