"""Properties of the grounded decode model (DESIGN 2b) and of the profiles derived from it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import replace
from importlib import resources

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.model.decode_model import DecodeModel, Efficiencies, expected_experts
from tailsieve.model.derive import (
    SHIPPED_CONFIGS,
    derive_profile,
    shipped_config,
    shipped_config_source,
)
from tailsieve.model.gpu_spec import GPUS, gpu_spec
from tailsieve.model.profiles import DERIVED_PROFILES, builtin_profile

CASES = [(m, g, tp) for m in SHIPPED_CONFIGS for g in ("h100", "h200", "b200") for tp in (1, 2)]


def dm(model: str, gpu: str = "h100", tp: int = 1, **eff: float) -> DecodeModel:
    return DecodeModel(shipped_config(model), gpu_spec(gpu), tp, Efficiencies(**eff))  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(CASES), b=st.integers(1, 2048), db=st.integers(0, 512),
       c=st.floats(0, 5e6), dc=st.floats(0, 5e6))
def test_tau_non_decreasing_in_batch_and_context(case: tuple[str, str, int], b: int, db: int,
                                                 c: float, dc: float) -> None:
    d = dm(*case)
    assert d.tau(b + db, c) >= d.tau(b, c) > 0
    assert d.tau(b, c + dc) >= d.tau(b, c)


def test_tau_of_empty_replica_is_zero() -> None:
    assert dm("qwen3-4b").tau(0, 1000) == 0.0


def brute_force_expected_experts(num_experts: int, top_k: int, b: int) -> float:
    """Mean distinct experts over every equally likely assignment of ``b`` tokens to top-k
    subsets (exact enumeration)."""
    subsets = list(itertools.combinations(range(num_experts), top_k))
    total = 0
    for choice in itertools.product(subsets, repeat=b):
        total += len(set().union(*choice))
    return total / len(subsets) ** b


@pytest.mark.parametrize(("num_experts", "top_k", "b"),
                         [(4, 1, 3), (5, 2, 3), (6, 2, 2), (6, 3, 3), (8, 2, 4), (3, 3, 2)])
def test_moe_expected_experts_matches_enumeration(num_experts: int, top_k: int, b: int) -> None:
    want = brute_force_expected_experts(num_experts, top_k, b)
    assert float(expected_experts(num_experts, top_k, b)) == pytest.approx(want, rel=1e-12)


def test_moe_expected_experts_limits() -> None:
    assert float(expected_experts(128, 8, 0)) == 0.0
    assert float(expected_experts(128, 8, 1)) == pytest.approx(8.0)
    assert float(expected_experts(128, 8, 10_000)) == pytest.approx(128.0)


def test_moe_reads_more_weights_as_batch_grows_and_dense_does_not() -> None:
    moe = dm("qwen3-30b-a3b", tp=2)
    w = moe.weight_bytes_read(np.array([1, 8, 64, 1024]))
    assert np.all(np.diff(w) > 0) and w[-1] == pytest.approx(moe.weight_bytes_per_gpu, rel=0.03)
    dense = dm("qwen3-4b")
    assert float(dense.weight_bytes_read(1)) == float(dense.weight_bytes_read(1000))


@pytest.mark.parametrize("model", SHIPPED_CONFIGS)
def test_tensor_parallel_halves_weights_per_gpu(model: str) -> None:
    one, two = dm(model, tp=1), dm(model, tp=2)
    assert two.weight_bytes_per_gpu == pytest.approx(one.weight_bytes_per_gpu / 2)
    assert float(two.weight_bytes_read(16)) == pytest.approx(float(one.weight_bytes_read(16)) / 2)
    assert two.flops_per_token == pytest.approx(one.flops_per_token / 2)
    assert two.kv_bytes_per_token_per_gpu == pytest.approx(one.kv_bytes_per_token_per_gpu / 2)
    assert two.kv_capacity_tokens > one.kv_capacity_tokens
    assert float(two.allreduce_s(8)) > 0 == float(one.allreduce_s(8))


def test_kv_heads_replicate_beyond_their_count() -> None:
    d = dm("qwen3.5-35b-a3b", tp=2)  # 2 KV heads: one per GPU
    wide = DecodeModel(d.model, d.gpu, 2, d.eff)
    assert wide.kv_bytes_per_token_per_gpu == d.model.kv_bytes_per_token / 2
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        DecodeModel(d.model, d.gpu, 3, d.eff)


@pytest.mark.parametrize(("model", "gpu", "tp"), [v for v in DERIVED_PROFILES.values()])
def test_capacity_positive_and_bounded_by_memory(model: str, gpu: str, tp: int) -> None:
    d = dm(model, gpu, tp)
    cap = d.kv_capacity_tokens
    assert cap > 0
    assert cap * d.kv_bytes_per_token_per_gpu < d.gpu.memory_bytes * 0.9 - d.weight_bytes_per_gpu


def test_capacity_errors_when_weights_do_not_fit() -> None:
    with pytest.raises(ConfigError, match=r"does not fit on l40s x1.*weights"):
        _ = dm("qwen3-30b-a3b", "l40s", 1).kv_capacity_tokens
    assert dm("qwen3-30b-a3b", "l40s", 2).kv_capacity_tokens > 0
    with pytest.raises(ConfigError, match="does not fit"):
        _ = dm("qwen3-4b", "h100", 1, gpu_memory_utilization=0.05).kv_capacity_tokens


def test_capacity_shrinks_with_less_memory_and_grows_on_h200() -> None:
    base = dm("qwen3-4b").kv_capacity_tokens
    assert dm("qwen3-4b", gpu_memory_utilization=0.8).kv_capacity_tokens < base
    assert dm("qwen3-4b", "h200").kv_capacity_tokens > base


def test_hybrid_state_is_a_per_request_cost_and_only_full_layers_hold_kv() -> None:
    hybrid = dm("qwen3.5-4b")
    m = hybrid.model
    assert m.num_full_attention_layers == 8 and m.linear_state_bytes_per_seq > 10e6
    assert m.kv_bytes_per_token == 2 * 8 * 4 * 256 * 2
    all_full = DecodeModel(replace(m, num_full_attention_layers=m.num_layers), hybrid.gpu, 1,
                           hybrid.eff)
    assert all_full.model.linear_state_bytes_per_seq == 0
    assert hybrid.c_s_per_request - all_full.c_s_per_request == pytest.approx(
        2 * m.linear_state_bytes_per_seq / hybrid.attention_bw)
    assert all_full.k_s_per_token == pytest.approx(4 * hybrid.k_s_per_token)
    assert hybrid.state_tokens_per_seq == pytest.approx(
        m.linear_state_bytes_per_seq / m.kv_bytes_per_token)


@pytest.mark.parametrize("kwargs", [
    {"weight_bandwidth": 0.0}, {"compute": 1.5}, {"attention_bandwidth": -0.1},
    {"roofline_p": 0.5}, {"step_overhead_s": -1e-3}, {"gpu_memory_utilization": 1.2},
    {"profile_num_tokens": 0},
])
def test_efficiencies_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        Efficiencies(**kwargs)  # type: ignore[arg-type]


def test_unknown_gpu_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown gpu 'v100'.*h100"):
        gpu_spec("v100")
    assert {"h100", "h200", "a100", "l40s", "b200"} <= set(GPUS)
    assert gpu_spec("a100").vllm_max_num_seqs == 256 and gpu_spec("h100").vllm_max_num_seqs == 1024


@pytest.mark.parametrize(("name", "spec"), list(DERIVED_PROFILES.items()))
def test_shipped_profile_is_what_the_command_derives(
        name: str, spec: tuple[str, str, int], assert_json_close: Callable[..., None]) -> None:
    model, gpu, tp = spec
    fresh = derive_profile(shipped_config(model), gpu, tp, name=name,
                           config_source=shipped_config_source(model))
    text = resources.files("tailsieve.model").joinpath("profiles", f"{name}.json").read_text()
    assert_json_close(json.loads(text), json.loads(json.dumps(fresh.to_dict())))


@pytest.mark.parametrize(("name", "spec"), list(DERIVED_PROFILES.items()))
def test_derived_table_interpolates_the_formula_within_1pct(name: str,
                                                            spec: tuple[str, str, int]) -> None:
    prof = builtin_profile(name)
    d = dm(*spec)
    b = np.arange(1, prof.max_measured_batch + 1)
    assert np.max(np.abs(prof.tau_array(b) / d.tau0(b) - 1)) < 0.01
    for batch, ctx in [(1, 0), (64, 64 * 2048), (300, 1e6)]:
        assert prof.step_s(batch, ctx) == pytest.approx(d.tau(batch, ctx), rel=0.01)
    assert prof.kv_capacity_tokens == d.kv_capacity_tokens
    assert prof.max_num_seqs == d.max_num_seqs == 1024
    prov = prof.provenance
    assert prov["kind"] == "derived" and prov["tensor_parallel"] == spec[2]
    assert any("vidur" in x["source"] for x in prov["measured_by_others"])
    assert prov["derived"]["k_s_per_token"] == prof.context_s_per_token


def test_qwen3_4b_h100_near_design_sanity_target() -> None:
    """DESIGN 2b: tau ~ 4.0 ms + 7 us * b + 59 ns * C, KV capacity ~400k tokens."""
    d = dm("qwen3-4b")
    assert 3.5e-3 < d.tau(1) < 5e-3
    assert 2e-6 < (d.tau(64) - d.tau(1)) / 63 < 12e-6
    assert 50e-9 < d.k_s_per_token < 90e-9
    assert 350_000 < d.kv_capacity_tokens < 500_000
