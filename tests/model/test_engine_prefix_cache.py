"""ReplicaEngine charges a continuation's prefill for its uncached prefix only."""

from __future__ import annotations

import pytest

from tailsieve.model.replica_engine import ReplicaConfig, ReplicaEngine
from tailsieve.model.throughput import ThroughputModel

FLAT = ThroughputModel.from_pairs([(1, 0.01), (64, 0.01)], name="flat")


def _finish_s(config: ReplicaConfig, **submit: int | bool) -> float:
    eng = ReplicaEngine(config)
    eng.submit("r", 100, 1000, **submit)  # type: ignore[arg-type]
    (done,) = eng.advance(1e9)
    return done.time_s


def test_continuation_pays_recompute_rate_on_uncached_prefix_only() -> None:
    cfg = ReplicaConfig(FLAT, prefill_s_per_token=0.0, recompute_s_per_token=1e-3)
    decode = 100 * 0.01
    assert _finish_s(cfg) == pytest.approx(decode)  # a fresh prompt: decode-only model
    assert _finish_s(cfg, continuation=True) == pytest.approx(decode + 1000 * 1e-3)
    assert _finish_s(cfg, continuation=True, cached_tokens=600) == pytest.approx(
        decode + 400 * 1e-3)
    assert _finish_s(cfg, continuation=True, cached_tokens=1000) == pytest.approx(decode)


def test_cached_prefix_reduces_first_prefill() -> None:
    cfg = ReplicaConfig(FLAT, prefill_s_per_token=2e-3)
    assert _finish_s(cfg, cached_tokens=250) == pytest.approx(1.0 + 750 * 2e-3)


def test_cached_tokens_out_of_range_is_refused() -> None:
    eng = ReplicaEngine(ReplicaConfig(FLAT))
    with pytest.raises(ValueError, match="cached_tokens"):
        eng.submit("r", 10, 5, cached_tokens=6)
