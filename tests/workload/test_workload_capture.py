"""Partial-rollout capture rate sanity checks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.workload.capture import CaptureConfig, candidates_at_cutoff, capture_rates


@dataclass
class Fixed:
    """Every response of prompt i has length lengths[i] at every step (perfect persistence)."""

    values: np.ndarray
    max_tokens: int | None = None

    def prompt_ids(self) -> tuple[str, ...]:
        return tuple(f"p{i}" for i in range(self.values.size))

    def group_lengths(
        self, prompt_id: str, step: int, n: int, rng: np.random.Generator
    ) -> np.ndarray:
        return np.full(n, self.values[int(prompt_id[1:])], dtype=np.int64)

    lengths = group_lengths


@dataclass
class Iid:
    """No persistence: every response is an independent draw."""

    num: int = 400
    max_tokens: int | None = None

    def prompt_ids(self) -> tuple[str, ...]:
        return tuple(f"p{i}" for i in range(self.num))

    def group_lengths(
        self, prompt_id: str, step: int, n: int, rng: np.random.Generator
    ) -> np.ndarray:
        return np.rint(np.exp(rng.normal(7, 1, n))).astype(np.int64)

    lengths = group_lengths


def test_single_replica_persistent_lengths_capture_everything() -> None:
    wl = Fixed(np.random.default_rng(0).permutation(400) * 10 + 100)
    res = capture_rates(wl, load_profile("illustrative-flat"), CaptureConfig(replicas=1, rounds=20))
    for r in res:
        assert r.same_round_capture == 1.0 and r.cross_step_capture == 1.0


def test_persistent_lengths_capture_is_high_across_replicas() -> None:
    rng = np.random.default_rng(1)
    wl = Fixed(np.rint(np.exp(rng.normal(7, 1, 400))).astype(np.int64))
    res = capture_rates(wl, load_profile("illustrative-flat"), CaptureConfig(rounds=60))
    for r in res:
        assert r.same_round_capture >= 0.8
        assert r.cross_step_capture == pytest.approx(r.same_round_capture)
        assert r.same_round_capture > 3 * r.random_baseline


def test_iid_lengths_cross_step_is_near_random() -> None:
    res = capture_rates(Iid(), load_profile("illustrative-flat"), CaptureConfig(rhos=(0.25,), rounds=150))
    r = res[0]
    assert r.same_round_capture > 0.6
    assert r.cross_step_capture == pytest.approx(r.random_baseline, abs=0.06)


def test_candidates_at_cutoff_and_config_validation() -> None:
    cand = candidates_at_cutoff(np.array([5.0, 1.0, 3.0, 9.0]), 2)
    assert cand.tolist() == [True, False, False, True]
    with pytest.raises(ConfigError):
        CaptureConfig(rhos=(0.0,))
    with pytest.raises(ConfigError):
        CaptureConfig(tail_metric="median")
