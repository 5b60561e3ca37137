"""The prefill model: derived from the config and the GPU, carried by the profiles, charged by
the replica engine; and the shipped derived profiles re-derive byte for byte."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from tailsieve.errors import ProfileError
from tailsieve.model.derive import (
    derive_profile,
    round_sig,
    rounded,
    shipped_config,
    shipped_config_source,
)
from tailsieve.model.gpu_spec import gpu_spec
from tailsieve.model.prefill import PrefillModel, derive_prefill
from tailsieve.model.profiles import DERIVED_PROFILES, builtin_profile, load_profile
from tailsieve.model.replica_config import ReplicaConfig, prefill_model_of
from tailsieve.model.replica_engine import ReplicaEngine
from tailsieve.model.throughput import ThroughputModel


@pytest.mark.parametrize(("name", "spec"), list(DERIVED_PROFILES.items()))
def test_shipped_profile_rederives_byte_for_byte(name: str, spec: tuple[str, str, int]) -> None:
    model, gpu, tp = spec
    fresh = derive_profile(shipped_config(model), gpu, tp, name=name,
                           config_source=shipped_config_source(model))
    text = resources.files("tailsieve.model").joinpath("profiles", f"{name}.json").read_text()
    assert json.dumps(fresh.to_dict(), indent=2) + "\n" == text


def test_rounding_is_to_six_significant_digits() -> None:
    assert round_sig(0.005116154270954248) == round_sig(0.005116154270954247) == 0.00511615
    assert rounded({"a": [1.23456789e-9, 3], "b": "x", "c": True}) == \
        {"a": [1.23457e-9, 3], "b": "x", "c": True}


def test_prefill_formula_qwen3_4b_h100() -> None:
    cfg = shipped_config("qwen3-4b")
    pre = derive_prefill(cfg, gpu_spec("h100"), 1, 0.64)
    rate = 989e12 * 0.64
    assert pre.s_per_token == pytest.approx(2 * (cfg.active_params - cfg.lm_head_params) / rate)
    assert pre.s_per_token_pair == pytest.approx(4 * 36 * 32 * 128 / rate)
    # 2k-token prompt: linear ~23.5 ms + attention ~2 ms, ~80k tok/s (about 0.64 x peak)
    assert 70_000 < pre.tokens_per_s(2048) < 90_000
    half = derive_prefill(cfg, gpu_spec("h100"), 2, 0.64)
    assert half.s_per_token == pytest.approx(pre.s_per_token / 2)
    assert half.s_per_token_pair == pytest.approx(pre.s_per_token_pair / 2)


def test_prefill_cost_is_additive_over_chunks() -> None:
    p = PrefillModel(1e-5, 1e-9)
    whole = p.cost_s(3000)
    assert p.cost_s(1000) + p.cost_s(2000, start=1000) == pytest.approx(whole)
    # the attention pairs of positions 0..2999: sum of j = 3000 * 2999 / 2
    assert whole == pytest.approx(3000 * 1e-5 + 1e-9 * 3000 * 2999 / 2)
    assert p.cost_s(0, start=50) == 0.0
    assert p.cost_s(10, start=1000) > p.cost_s(10)  # later positions attend to more tokens


def test_profiles_carry_prefill_and_old_files_fall_back(tmp_path: Path) -> None:
    prof = builtin_profile("qwen3-4b-h100")
    assert prof.prefill is not None and prefill_model_of(prof) == prof.prefill
    old = prof.to_dict()
    del old["prefill"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    legacy = load_profile(path)
    assert legacy.prefill is None
    assert prefill_model_of(legacy).s_per_token > 0  # from the provenance, linear part only
    assert prefill_model_of(legacy).s_per_token_pair == 0.0
    assert prefill_model_of(load_profile("cpu")) == PrefillModel(0.0)
    assert prof.scaled(2.0).prefill == prof.prefill.scaled(2.0)
    with pytest.raises(ProfileError, match="s_per_token must be a finite number"):
        ThroughputModel.from_dict({**prof.to_dict(), "prefill": {"s_per_token": -1}})
    with pytest.raises(ProfileError, match="'prefill' must be an object"):
        ThroughputModel.from_dict({**prof.to_dict(), "prefill": 3})


def test_engine_charges_uncached_positions_of_a_continuation() -> None:
    prof = builtin_profile("qwen3-4b-h100")
    cfg = ReplicaConfig.from_profile(prof)
    pre = prof.prefill
    assert pre is not None
    assert cfg.recompute_cost_s(3000, 1000) == pytest.approx(pre.cost_s(3000, 1000))
    assert cfg.prefill_cost_s(500) == 0.0  # first prefills stay free unless asked for
    charged = ReplicaConfig.from_profile(prof, prefill_s_per_token="profile")
    assert charged.prefill_cost_s(500, 100) == pytest.approx(pre.cost_s(500, 100))
    for cached in (0, 1000):
        eng = ReplicaEngine(cfg)
        eng.submit("r", 10, prompt_tokens=4000, cached_tokens=cached, continuation=True)
        (done,) = eng.advance(10.0)
        stall = pre.cost_s(4000 - cached, cached)
        # the engine's context grows continuously: 10 steps read 4000 * 10 + 10^2 / 2 tokens
        decode = 10 * prof.tau(1) + prof.context_s_per_token * (4000 * 10 + 10**2 / 2)
        assert done.time_s == pytest.approx(stall + decode, rel=1e-9)
