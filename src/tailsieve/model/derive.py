"""Derive a throughput profile from a model config and a GPU (``tailsieve profile --from-config``).

The profile is an ordinary ``ThroughputModel``: its ``points`` table is ``tau(b, C = 0)`` on a
dense grid of batch sizes (linear interpolation between them is within 0.2% of the formula),
``context_s_per_token`` is ``k``; ``tau(b, C) = table(b) + k * C`` is exactly the decode model
because the context term is additive. It also carries the KV capacity, vLLM's default
``max_num_seqs`` and its provenance (which inputs are measured by others, with their sources,
and which numbers are derived), and the prefill cost (``tailsieve.model.prefill``).

Every float of a derived profile is rounded to ``SIG_DIGITS`` significant digits, so that
deriving again on another CPU or numpy build (which may differ in the last bit) writes the
shipped file byte for byte (a test re-derives every shipped profile and compares the text).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.model.decode_model import DecodeModel, Efficiencies
from tailsieve.model.gpu_spec import gpu_spec
from tailsieve.model.model_config import ModelConfig
from tailsieve.model.prefill import PrefillModel, derive_prefill
from tailsieve.model.throughput import ThroughputModel, ThroughputPoint

SIG_DIGITS = 6  # significant digits of every float in a derived profile

SHIPPED_CONFIGS: tuple[str, ...] = ("qwen3-4b", "qwen3-30b-a3b", "qwen3.5-4b", "qwen3.5-35b-a3b")

MEASURED_BY_OTHERS: tuple[dict[str, str], ...] = (
    {"figure": "GEMM weight streaming 2.60 TB/s at b=1 (weight_bandwidth 0.775); element-wise "
               "floor 0.019 ms/layer; smooth-roofline fit (compute 0.78, p 1.5)",
     "source": "Vidur H100 profile of Llama-2-7B, microsoft/vidur "
               "data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"},
    {"figure": "paged decode attention ~1.8 TB/s on H100 at 2-4k context, batch 16 "
               "(attention_bandwidth 0.54)",
     "source": "Dao-AILab/flash-attention issue 1572 (FlashAttention-3 paged KV decode)"},
    {"figure": "small all-reduce on 2 NVLink H100s, 7-11 us (allreduce_latency_s 8 us)",
     "source": "microsoft/vidur data/profiling/network/h100_dgx/all_reduce.csv"},
    {"figure": "prefill at 0.64 x dense bf16 peak (prefill_compute): the non-attention ops of "
               "one Llama-2-7B layer on a 1,024-token chunk take 0.657 ms on H100",
     "source": "Vidur H100 profile of Llama-2-7B, microsoft/vidur "
               "data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"},
    {"figure": "HBM bandwidth, dense bf16 FLOP/s, memory, interconnect",
     "source": "NVIDIA datasheets (see tailsieve.model.gpu_spec)"},
    {"figure": "gpu_memory_utilization 0.9, max_num_seqs 1024 on >= 70 GiB non-A100 GPUs "
               "(256 otherwise), max_num_batched_tokens 8192",
     "source": "vLLM V1 engine defaults (vllm/engine/arg_utils.py)"},
)


def round_sig(x: float, digits: int = SIG_DIGITS) -> float:
    """``x`` rounded to ``digits`` significant digits (decimal, as JSON will print it)."""
    return float(f"{float(x):.{digits}g}")


def rounded(obj: Any, digits: int = SIG_DIGITS) -> Any:
    """A copy of a JSON-like value with every float rounded to ``digits`` significant
    digits (ints, strings and booleans unchanged)."""
    if isinstance(obj, float):
        return round_sig(obj, digits)
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rounded(v, digits) for v in obj]
    return obj


def batch_grid(max_batch: int) -> list[int]:
    """1..32 every integer, then every ~3% up to ``max_batch`` (dense enough that linear
    interpolation of the (convex at the knee) formula stays well inside 1%)."""
    grid = list(range(1, min(32, max_batch) + 1))
    b = 32.0
    while b < max_batch:
        b *= 1.03
        nxt = min(round(b), max_batch)
        if nxt > grid[-1]:
            grid.append(nxt)
    return grid


def shipped_config(name: str) -> ModelConfig:
    """One of the shipped Hugging Face configs by name (see ``SHIPPED_CONFIGS``)."""
    key = name.strip().lower()
    if key not in SHIPPED_CONFIGS:
        raise ConfigError(f"unknown model {name!r}; shipped configs: {', '.join(SHIPPED_CONFIGS)}")
    text = resources.files("tailsieve.model").joinpath("configs", f"{key}.json").read_text()
    return ModelConfig.from_hf(json.loads(text), name=key)


def shipped_config_source(name: str) -> str:
    text = resources.files("tailsieve.model").joinpath("configs", f"{name}.json").read_text()
    return str(json.loads(text).get("_source", ""))


def derive_profile(model: ModelConfig, gpu: str, tp: int = 1,
                   eff: Efficiencies | None = None, name: str | None = None,
                   config_source: str = "", max_batch: int | None = None) -> ThroughputModel:
    """The throughput profile of ``model`` served on ``tp`` GPUs of kind ``gpu``."""
    dm = DecodeModel(model, gpu_spec(gpu), tp, eff or Efficiencies())
    capacity = dm.kv_capacity_tokens  # raises when the model does not fit
    top = max(max_batch or 0, dm.max_num_seqs, 64)
    grid = batch_grid(top)
    taus = dm.tau0(np.array(grid, dtype=np.float64))
    pts = tuple(ThroughputPoint(b, round_sig(float(t))) for b, t in zip(grid, taus, strict=True))
    pre = derive_prefill(model, dm.gpu, tp, dm.eff.prefill_compute)
    prefill = PrefillModel(round_sig(pre.s_per_token), round_sig(pre.s_per_token_pair))
    label = name or f"{model.name}-{dm.gpu.name}" + (f"-tp{tp}" if tp > 1 else "")
    tau1 = float(dm.tau0(1))
    tau64 = dm.tau(64, 64 * 2048)
    source = (f"derived, not measured: {model.name} on {dm.gpu.description}"
              + (f" x{tp} (tensor parallel)" if tp > 1 else "")
              + f" from its config.json with the decode model of docs/performance-model.md; "
              f"tau(1) = {tau1 * 1e3:.2f} ms ({1 / tau1:.0f} tok/s), k = "
              f"{dm.k_s_per_token * 1e9:.1f} ns per context token, KV capacity {capacity:,} "
              f"tokens; prefill {prefill.tokens_per_s(2048):,.0f} tok/s at a 2k prompt")
    return ThroughputModel(
        points=pts,
        name=label,
        source=source,
        context_s_per_token=round_sig(dm.k_s_per_token),
        kv_capacity_tokens=capacity,
        max_num_seqs=dm.max_num_seqs,
        provenance=rounded(provenance(dm, config_source, tau64, prefill)),
        prefill=prefill,
    )


def provenance(dm: DecodeModel, config_source: str, tau64_2k_s: float,
               prefill: PrefillModel | None = None) -> dict[str, Any]:
    """What the profile rests on: inputs measured by others, and the derived numbers."""
    m = dm.model
    return {
        "kind": "derived",
        "method": "tailsieve.model.decode_model: tau(b, C) = a0 + R(W(b)/BW_eff, b*F/P_eff) "
                  "+ k*C + c_s*b + allreduce(b); points = tau(b, 0), context_s_per_token = k; "
                  "tailsieve.model.prefill: prefill of positions [s, e) = s_per_token (e - s) "
                  "+ s_per_token_pair (e(e-1) - s(s-1))/2, compute-bound at "
                  "prefill_compute x peak",
        "model": {"name": m.name, "config_source": config_source,
                  "total_params": m.total_params, "active_params": m.active_params,
                  "num_layers": m.num_layers,
                  "num_full_attention_layers": m.num_full_attention_layers,
                  "kv_bytes_per_token": m.kv_bytes_per_token,
                  "linear_state_bytes_per_seq": m.linear_state_bytes_per_seq,
                  "num_experts": m.num_experts, "num_experts_per_tok": m.num_experts_per_tok},
        "gpu": {"name": dm.gpu.name, "description": dm.gpu.description,
                "hbm_bytes_per_s": dm.gpu.hbm_bytes_per_s,
                "bf16_flop_per_s": dm.gpu.bf16_flop_per_s, "memory_bytes": dm.gpu.memory_bytes,
                "interconnect_bytes_per_s": dm.gpu.interconnect_bytes_per_s,
                "source": dm.gpu.source},
        "tensor_parallel": dm.tp,
        "efficiencies": dm.eff.to_dict(),
        "measured_by_others": [dict(x) for x in MEASURED_BY_OTHERS],
        "derived": {
            "a0_s": dm.a0_s,
            "k_s_per_token": dm.k_s_per_token,
            "c_s_per_request": dm.c_s_per_request,
            "weight_bytes_per_gpu": dm.weight_bytes_per_gpu,
            "weight_bytes_read_b1": float(dm.weight_bytes_read(1)),
            "flops_per_token_per_gpu": dm.flops_per_token,
            "kv_bytes_per_token_per_gpu": dm.kv_bytes_per_token_per_gpu,
            "activation_bytes_per_gpu": dm.activation_bytes_per_gpu,
            "kv_capacity_tokens": dm.kv_capacity_tokens,
            "state_tokens_per_seq": dm.state_tokens_per_seq,
            "max_num_seqs": dm.max_num_seqs,
            "tau_b1_s": float(dm.tau0(1)),
            "tau_b64_ctx2k_s": tau64_2k_s,
            **({} if prefill is None else {
                "prefill_s_per_token": prefill.s_per_token,
                "prefill_s_per_token_pair": prefill.s_per_token_pair,
                "prefill_tokens_per_s_2k_prompt": prefill.tokens_per_s(2048)}),
        },
    }
