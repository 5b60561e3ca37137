"""Prompt lookup: the incremental matcher equals vLLM's rule done by brute force."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.drafts.prompt_lookup import NgramConfig, NgramMatcher


def naive_ngram_propose(tokens: Sequence[int], num_speculative_tokens: int,
                        config: NgramConfig) -> tuple[int, ...]:
    """Reference: vLLM's prompt-lookup rule by brute force."""
    n = len(tokens)
    for size in range(min(config.prompt_lookup_max, n), config.prompt_lookup_min - 1, -1):
        pattern = list(tokens[n - size:])
        for i in range(0, n - size):
            if list(tokens[i:i + size]) == pattern:
                return tuple(tokens[i + size:i + size + num_speculative_tokens])
    return ()



@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=40), st.integers(1, 3),
       st.integers(0, 3), st.integers(1, 8))
def test_matcher_equals_brute_force_at_every_length(tokens: list[int], lo: int, extra: int,
                                                    k: int) -> None:
    cfg = NgramConfig(lo, lo + extra)
    m = NgramMatcher(cfg)
    for t in range(len(tokens)):
        m.extend(tokens[t:t + 1])
        assert m.propose(k) == naive_ngram_propose(tokens[:t + 1], k, cfg)


def test_hand_made_sequence() -> None:
    # "5 6 7 8 ... 5 6": the 2-gram "5 6" occurred at 0; draft what followed it
    cfg = NgramConfig(1, 4)
    assert NgramMatcher(cfg, [5, 6, 7, 8, 9, 5, 6]).propose(3) == (7, 8, 9)
    # the earliest occurrence of the longest n-gram wins; the draft may run into the end
    assert NgramMatcher(cfg, [1, 2, 1, 2, 1, 2]).propose(8) == (1, 2)  # "1 2 1 2" at 0
    # no earlier occurrence at any size in the window: no draft
    assert NgramMatcher(NgramConfig(2, 3), [1, 2, 3, 4]).propose(4) == ()


def test_vllm_window_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="prompt_lookup_min"):
        NgramConfig(3, 2)
    with pytest.raises(ValueError, match="prompt_lookup_min"):
        NgramConfig(0, 2)
