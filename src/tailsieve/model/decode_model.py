"""Decode step time of a model on a GPU, from first principles (DESIGN section 2b).

``tau(b, C) = a0 + R(W(b) / BW_eff, b * F / P_eff) + k * C + c_s * b + AR(b)``

- ``W(b)``: weight bytes one GPU reads per step (dense weights / tp; for MoE the routed experts
  only as far as the ``b`` tokens touch them: ``E(b) = E * (1 - (1 - topk/E)^b)`` experts per
  layer); ``F``: FLOPs per token per GPU (2 x active parameters / tp).
- ``R(m, c) = (m^p + c^p)^(1/p)``: the roofline. ``p -> inf`` is ``max(m, c)``; a GEMM that is
  neither memory- nor compute-bound overlaps the two imperfectly, and ``p = 1.5`` reproduces
  Vidur's H100 GEMM timings across b = 1..1024 (see ``docs/performance-model.md``).
- ``k = KV bytes per token per GPU / (HBM x attention efficiency)``: attention reads every
  cached token of every running request.
- ``c_s``: per-request cost: element-wise activation traffic, the logits and sampler, and for
  hybrid models the linear-attention state read and written every step.
- ``a0``: fixed per-step cost: a small-kernel floor per layer plus the engine's step overhead.
- ``AR(b)``: under tensor parallelism two all-reduces of ``b x hidden`` per layer.

KV capacity follows vLLM: ``(memory x gpu_memory_utilization - weights - activations) / KV bytes
per token`` (per GPU; every GPU of a TP group holds its share of every token). A hybrid model's
per-sequence linear-attention state comes out of the same pool while the sequence runs; it is
reported as ``state_tokens_per_seq`` and not subtracted from the capacity.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.gpu_spec import GIB, GpuSpec
from tailsieve.model.model_config import ModelConfig

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Efficiencies:
    """Achieved fractions of peak and fixed costs; defaults documented per field."""

    # GEMM weight streaming at small batch: Vidur H100 Llama-2-7B, four GEMMs of a layer at b=1
    # take 0.156 ms for 404.8 MB = 2.60 TB/s = 0.775 x 3.35 TB/s.
    weight_bandwidth: float = 0.775
    # Dense bf16 tensor-core rate inside the smooth roofline, fitted to the same Vidur table
    # (b = 64..1024; 0.78 x 989 TFLOP/s; the achieved rate at b = 1024 is 0.64 x peak).
    compute: float = 0.78
    # Roofline sharpness p of R(m, c) = (m^p + c^p)^(1/p); fitted with ``compute`` on Vidur.
    roofline_p: float = 1.5
    # Paged decode attention reading the KV cache: ~1.8 TB/s on H100 at 2-4k context, batch 16
    # (FlashAttention-3 paged decode, Dao-AILab/flash-attention issue 1572) = 0.54 x 3.35 TB/s.
    attention_bandwidth: float = 0.54
    # Element-wise ops (2 RMSNorms, rope, SiLU-and-mul, residual adds) at small batch: Vidur
    # H100 Llama-2-7B, 0.019 ms per layer at b = 1..64 (launch-bound kernels).
    per_layer_overhead_s: float = 19e-6
    # Decode attention kernel floor per full-attention layer (launch + split-KV reduction)
    # at tiny contexts; the onnxruntime H100 paged-decode table (PR 21414) bottoms out at ~21 us
    # for 64 x 32 tokens; 10 us is the part not already covered by the element-wise floor.
    attention_floor_s: float = 10e-6
    # Engine time per step outside the GPU kernels that async scheduling does not hide
    # (input preparation, sampler bookkeeping, output processing). An estimate, not a
    # measurement: 0.3 ms.
    step_overhead_s: float = 0.3e-3
    # Achieved fraction of dense bf16 peak in a prefill (long GEMMs and causal attention over a
    # chunk of tokens): Vidur H100 Llama-2-7B, the non-attention operators of one layer on a
    # 1,024-token chunk take 0.657 ms for 2 x 202 M parameters x 1,024 tokens = 0.64 x 989
    # TFLOP/s. FlashAttention-3 reports 0.6-0.75 of peak for long causal bf16 attention.
    prefill_compute: float = 0.64
    # Passes over the fp32 logits per request (lm_head write, softmax, top-p/top-k, sample).
    logits_passes: float = 4.0
    # One small all-reduce over NVLink with vLLM's custom all-reduce: Vidur h100_dgx
    # all_reduce.csv, 2 GPUs, <= 300 kB messages, fast mode 7-11 us.
    allreduce_latency_s: float = 8e-6
    # vLLM defaults.
    gpu_memory_utilization: float = 0.9
    # Tokens of the profiling forward pass vLLM runs to size activations
    # (max_num_batched_tokens default on >= 70 GiB GPUs for an API server).
    profile_num_tokens: int = 8192
    # CUDA graphs, NCCL/cuBLAS workspaces and allocator slack held outside the KV cache.
    reserved_bytes: int = int(1.5 * GIB)

    def __post_init__(self) -> None:
        for label in ("weight_bandwidth", "compute", "attention_bandwidth",
                      "gpu_memory_utilization", "prefill_compute"):
            v = getattr(self, label)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 1):
                raise ConfigError(f"efficiency {label} must be in (0, 1], got {v!r}")
        if not (math.isfinite(self.roofline_p) and self.roofline_p >= 1):
            raise ConfigError(f"roofline_p must be >= 1, got {self.roofline_p!r}")
        for label in ("per_layer_overhead_s", "attention_floor_s", "step_overhead_s",
                      "logits_passes", "allreduce_latency_s"):
            v = getattr(self, label)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"{label} must be a finite number >= 0, got {v!r}")
        if self.profile_num_tokens < 1 or self.reserved_bytes < 0:
            raise ConfigError("profile_num_tokens must be >= 1 and reserved_bytes >= 0")

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def expected_experts(num_experts: int, top_k: int, b: npt.ArrayLike) -> FloatArray:
    """Expected distinct experts touched by ``b`` tokens each routed to ``top_k`` of
    ``num_experts`` uniformly: ``E * (1 - (1 - top_k/E)^b)``."""
    arr = np.maximum(np.asarray(b, dtype=np.float64), 0.0)
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** arr)


@dataclass(frozen=True, slots=True)
class DecodeModel:
    """``tau(b, C)`` and KV capacity of one replica: a model on ``tp`` GPUs of one kind."""

    model: ModelConfig
    gpu: GpuSpec
    tp: int = 1  # tensor-parallel degree (GPUs per replica)
    eff: Efficiencies = Efficiencies()

    def __post_init__(self) -> None:
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1:
            raise ConfigError(f"tensor parallelism must be an integer >= 1, got {self.tp!r}")
        if self.model.num_kv_heads % self.tp and self.tp % self.model.num_kv_heads:
            raise ConfigError(f"tp={self.tp} does not divide or multiply num_key_value_heads="
                              f"{self.model.num_kv_heads}")

    # ---- bandwidths ----
    @property
    def weight_bw(self) -> float:
        return self.gpu.hbm_bytes_per_s * self.eff.weight_bandwidth

    @property
    def attention_bw(self) -> float:
        return self.gpu.hbm_bytes_per_s * self.eff.attention_bandwidth

    @property
    def flops(self) -> float:
        return self.gpu.bf16_flop_per_s * self.eff.compute

    # ---- per-GPU sizes ----
    @property
    def weight_bytes_per_gpu(self) -> float:
        """Weights held by one GPU (TP shards everything but the tiny norms)."""
        return self.model.total_params * self.model.dtype_bytes / self.tp

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV bytes one context token occupies on each GPU (KV heads replicate when tp
        exceeds their count)."""
        heads = max(self.model.num_kv_heads / self.tp, 1.0)
        return self.model.kv_bytes_per_token * heads / self.model.num_kv_heads

    def weight_bytes_read(self, b: npt.ArrayLike) -> FloatArray:
        """``W(b)``: weight bytes one GPU reads in a decode step of ``b`` tokens."""
        m = self.model
        always = m.attention_params_total + m.num_layers * m.shared_mlp_params + m.lm_head_params
        out = np.full_like(np.asarray(b, dtype=np.float64), float(always))
        if m.is_moe:
            out = out + m.num_layers * m.expert_params * expected_experts(
                m.num_experts, m.num_experts_per_tok, b)
        return out * m.dtype_bytes / self.tp

    @property
    def flops_per_token(self) -> float:
        """``F``: FLOPs one token costs on one GPU (2 x active parameters / tp)."""
        return 2.0 * self.model.active_params / self.tp

    # ---- the four terms ----
    @property
    def a0_s(self) -> float:
        """Fixed per-step seconds: engine overhead + per-layer small-kernel floors."""
        m = self.model
        return (self.eff.step_overhead_s + m.num_layers * self.eff.per_layer_overhead_s
                + m.num_full_attention_layers * self.eff.attention_floor_s)

    @property
    def k_s_per_token(self) -> float:
        """``k``: seconds per decode step per token of context held by the batch."""
        return self.kv_bytes_per_token_per_gpu / self.attention_bw

    @property
    def activation_bytes_per_token(self) -> float:
        """Element-wise traffic of one token per step (norms, rope, activation, residuals)."""
        m = self.model
        ffn = (m.num_experts_per_tok * m.moe_intermediate_size + m.shared_expert_intermediate_size
               if m.is_moe else m.intermediate_size)
        return m.num_layers * (14 * m.hidden_size + 3 * ffn) * m.dtype_bytes / self.tp

    @property
    def c_s_per_request(self) -> float:
        """``c_s``: seconds per decode step per running request (activations, logits and
        sampling, and the linear-attention state read and written back)."""
        m = self.model
        logits = self.eff.logits_passes * m.vocab_size * 4 / self.tp
        state = 2.0 * m.linear_state_bytes_per_seq / self.tp
        return ((self.activation_bytes_per_token + logits) / self.weight_bw
                + state / self.attention_bw)

    def allreduce_s(self, b: npt.ArrayLike) -> FloatArray:
        """Two all-reduces of ``b x hidden`` activations per layer under TP (ring)."""
        arr = np.asarray(b, dtype=np.float64)
        if self.tp == 1:
            return np.zeros_like(arr)
        size = arr * self.model.hidden_size * self.model.dtype_bytes
        one = (self.eff.allreduce_latency_s
               + 2 * (self.tp - 1) / self.tp * size / self.gpu.interconnect_bytes_per_s)
        return 2 * self.model.num_layers * one

    def linear_s(self, b: npt.ArrayLike) -> FloatArray:
        """The smooth roofline of the weight GEMMs."""
        arr = np.asarray(b, dtype=np.float64)
        mem = self.weight_bytes_read(arr) / self.weight_bw
        comp = arr * self.flops_per_token / self.flops
        p = self.eff.roofline_p
        return np.asarray((mem**p + comp**p) ** (1.0 / p), dtype=np.float64)

    def layer_linear_s(self, b: npt.ArrayLike) -> FloatArray:
        """Non-attention time of one dense full-attention layer (projections, MLP, norms,
        rope, activation, residual adds): what Vidur's ``mlp.csv`` profiles per layer."""
        m = self.model
        arr = np.asarray(b, dtype=np.float64)
        params = (m.full_attention_params + m.dense_mlp_params) / self.tp
        mem = params * m.dtype_bytes / self.weight_bw
        comp = arr * 2.0 * params / self.flops
        p = self.eff.roofline_p
        act = self.activation_bytes_per_token / m.num_layers / self.weight_bw
        return np.asarray(self.eff.per_layer_overhead_s + (mem**p + comp**p) ** (1.0 / p)
                          + arr * act, dtype=np.float64)

    def attention_layer_s(self, context_tokens: npt.ArrayLike) -> FloatArray:
        """Decode attention time of one full-attention layer over ``context_tokens`` cached
        tokens in total (the kernel floor plus reading them)."""
        per_layer = self.kv_bytes_per_token_per_gpu / max(self.model.num_full_attention_layers, 1)
        arr = np.asarray(context_tokens, dtype=np.float64)
        return np.asarray(self.eff.attention_floor_s + arr * per_layer / self.attention_bw,
                          dtype=np.float64)

    def tau0(self, b: npt.ArrayLike) -> FloatArray:
        """``tau(b, 0)``: the step at zero context (``tau(0) = 0``)."""
        arr = np.asarray(b, dtype=np.float64)
        out = self.a0_s + self.linear_s(arr) + self.c_s_per_request * arr + self.allreduce_s(arr)
        return np.where(arr <= 0, 0.0, out)

    def tau(self, b: float, context_tokens: float = 0.0) -> float:
        """Seconds of one decode step at batch ``b`` holding ``context_tokens`` in total."""
        if b <= 0:
            return 0.0
        return float(self.tau0(b)) + self.k_s_per_token * context_tokens

    # ---- memory ----
    @property
    def activation_bytes_per_gpu(self) -> float:
        """Peak activations of vLLM's profiling pass plus the sampler's logits, plus the
        reserved workspaces."""
        m = self.model
        ffn = (m.num_experts_per_tok * m.moe_intermediate_size + m.shared_expert_intermediate_size
               if m.is_moe else m.intermediate_size)
        n = self.eff.profile_num_tokens
        hidden_peak = n * (2 * ffn / self.tp + 4 * m.hidden_size) * m.dtype_bytes
        logits = self.gpu.vllm_max_num_seqs * m.vocab_size * 4 * 2 / self.tp
        return hidden_peak + logits + self.eff.reserved_bytes

    @property
    def state_tokens_per_seq(self) -> float:
        """A running sequence's linear-attention state in KV-token equivalents (hybrid models:
        vLLM allocates it from the same pool; 0 otherwise)."""
        return self.model.linear_state_bytes_per_seq / self.tp / self.kv_bytes_per_token_per_gpu

    @property
    def max_num_seqs(self) -> int:
        return self.gpu.vllm_max_num_seqs

    @property
    def kv_capacity_tokens(self) -> int:
        """Context tokens the KV cache of one replica holds; a ``ConfigError`` when the weights
        and activations leave no room."""
        budget = self.gpu.memory_bytes * self.eff.gpu_memory_utilization
        free = budget - self.weight_bytes_per_gpu - self.activation_bytes_per_gpu
        if free <= 0:
            raise ConfigError(
                f"{self.model.name} does not fit on {self.gpu.name} x{self.tp}: weights "
                f"{self.weight_bytes_per_gpu / GIB:.1f} GiB + activations "
                f"{self.activation_bytes_per_gpu / GIB:.1f} GiB per GPU exceed "
                f"{budget / GIB:.1f} GiB (memory x gpu_memory_utilization)")
        return int(free // self.kv_bytes_per_token_per_gpu)
