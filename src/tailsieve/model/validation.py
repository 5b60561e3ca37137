"""The decode model against public measurements (each figure with its source).

``validation_rows()`` evaluates the model at the measured configurations; the tests in
``tests/model/test_decode_validation.py`` assert the tolerances, ``benchmarks/
bench_decode_validation.py`` writes the table for ``docs/performance-model.md`` and
``BENCHMARKS.md``. Note what is fitted and what is independent: the efficiencies of the linear
part come from the Vidur table itself (``Efficiencies`` documents which), so that row checks
the *shape* of the roofline across b = 1..1024 with three fitted numbers; the attention rows,
the batch-1 speeds and the other-GPU rows are predictions with those defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailsieve.model.decode_model import DecodeModel, Efficiencies
from tailsieve.model.derive import shipped_config
from tailsieve.model.gpu_spec import MIB, GpuSpec, gpu_spec
from tailsieve.model.model_config import ModelConfig
from tailsieve.model.prefill import derive_prefill

# Llama-2-7B as configured on the Hugging Face hub (meta-llama/Llama-2-7b-hf config.json).
LLAMA2_7B: dict[str, object] = {
    "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
    "tie_word_embeddings": False, "torch_dtype": "float16",
}

# Vidur's H100 profile of Llama-2-7B: microsoft/vidur,
# data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv (commit e26eb8f7), TP 1: per
# layer, the sum of the median times of input_layernorm, attn_pre_proj, attn_rope,
# attn_post_proj, post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj and add (ms).
VIDUR_LLAMA2_7B_H100_LAYER_MS: dict[int, float] = {
    1: 0.175, 2: 0.171, 4: 0.172, 8: 0.172, 16: 0.181, 32: 0.181, 64: 0.183,
    128: 0.199, 256: 0.286, 512: 0.3745, 1024: 0.657,
}
VIDUR_SOURCE = ("microsoft/vidur data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv "
                "(non-attention ops per layer, medians, TP 1)")

# Out of sample: the same Vidur H100 tables (TP 1, same ops, ms per layer) for larger models,
# data/profiling/compute/h100/<model>/mlp.csv; predicted with the efficiencies fitted on
# Llama-2-7B. name -> (config fields, {b: ms}).
VIDUR_OTHER_H100_LAYER_MS: dict[str, tuple[dict[str, object], dict[int, float]]] = {
    "codellama/CodeLlama-34b-Instruct-hf": (
        {"num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 8192,
         "intermediate_size": 22016, "vocab_size": 32768},
        {1: 0.5075, 64: 0.5225, 128: 0.551, 256: 0.636, 512: 1.113}),
    "meta-llama/Llama-2-70b-hf": (
        {"num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 8192,
         "intermediate_size": 28672, "vocab_size": 32768},
        {1: 0.625, 64: 0.6335, 128: 0.648, 256: 0.764, 512: 1.256}),
    "Qwen/Qwen-72B": (
        {"num_attention_heads": 64, "num_key_value_heads": 64, "hidden_size": 8192,
         "intermediate_size": 24576, "vocab_size": 152064},
        {1: 0.6385, 64: 0.665, 128: 0.683, 256: 0.798, 512: 1.302}),
    "internlm/internlm-20b": (
        {"num_attention_heads": 40, "num_key_value_heads": 40, "hidden_size": 5120,
         "intermediate_size": 13824, "vocab_size": 103168},
        {1: 0.256, 64: 0.258, 128: 0.2785, 256: 0.356, 512: 0.5465}),
}

# FlashAttention-3 paged-KV decode on H100 (Dao-AILab/flash-attention issue 1572, comment of
# 2025-04-11 by TheRainstorm, flash_attention_benchmark.py with CUDA graphs): batch 16, 32 query
# / 32 KV heads x 128, fp16, page size 8; microseconds per call (1796 GB/s at 2000, 1849 GB/s
# at 4000).
FA3_H100_BATCH = 16
FA3_H100_US: dict[int, float] = {128: 27.6, 2000: 292.0, 4000: 567.2}
FA3_SOURCE = "Dao-AILab/flash-attention issue 1572 (FA3 paged decode on H100, batch 16, MHA 32x128)"
MHA_LAYER: dict[str, object] = {
    "num_hidden_layers": 1, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 32, "head_dim": 128, "intermediate_size": 11008, "vocab_size": 32000,
    "torch_dtype": "float16",
}

# Published batch-1 decode speed of ~4B models on one H100: 133-200 tok/s
# (docs/design.md, "GPU decode model").
PUBLISHED_4B_H100_TOK_S = (133.0, 200.0)

# vLLM serving measurements at concurrency 1 (tenstorrent/tt-inference-server GPU references,
# ISL 128 / OSL 1024): Qwen3-4B on an RTX 4090, TPOT 10.4 ms (issue 394); Qwen3-1.7B on an
# A100, TPOT 4.7 ms (issue 340).
RTX4090 = GpuSpec("rtx4090", "NVIDIA GeForce RTX 4090 24GB", 1008e9, 165e12, 24564 * MIB, 32e9,
                  256, "NVIDIA RTX 4090 datasheet (1,008 GB/s GDDR6X, 165 TFLOP/s dense bf16)")
QWEN3_1_7B: dict[str, object] = {
    "num_hidden_layers": 28, "hidden_size": 2048, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 6144,
    "vocab_size": 151936, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
}
TPOT_REFERENCES: tuple[tuple[str, str, float, str], ...] = (
    ("qwen3-4b", "rtx4090", 10.4e-3, "tenstorrent/tt-inference-server issue 394 (vLLM, 4090)"),
    ("qwen3-1.7b", "a100", 4.7e-3, "tenstorrent/tt-inference-server issue 340 (vLLM, A100)"),
)


# Prefill, published: NVIDIA NIM LLM benchmarking guide, "Performance" page, Llama-3.3-70b-instruct,
# NIM 1.8.0 on 2 x H100 80GB, fp8, TP2, 5000 input / 500 output tokens, concurrency 1: TTFT
# 406.77 ms (and 47.77 ms for 500 input / 2000 output tokens). TTFT also holds the HTTP round
# trip, tokenization and scheduling (tens of ms), so the short prompt bounds the fixed part.
# The GEMMs run in fp8: the model is evaluated with H100's dense fp8 peak (1,979 TFLOP/s, twice
# bf16; NVIDIA H100 datasheet) at the same prefill efficiency.
LLAMA33_70B: dict[str, object] = {
    "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
    "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
NIM_SOURCE = ("NVIDIA NIM LLM benchmarking, Performance, Llama-3.3-70b-instruct 1.8.0, "
              "2 x H100 fp8 TP2, concurrency 1 "
              "(https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance)")
NIM_LLAMA33_70B_TTFT_S: dict[int, float] = {5000: 406.77e-3, 500: 47.77e-3}
H100_FP8 = GpuSpec("h100-fp8", "NVIDIA H100 SXM5 80GB (dense fp8 peak)", 3.35e12, 1979e12,
                   81559 * MIB, 450e9, 1024,
                   "NVIDIA H100 datasheet (SXM5: 1,979 TFLOP/s dense fp8)")


@dataclass(frozen=True, slots=True)
class ValidationRow:
    """One comparison of the model with a published measurement."""

    part: str  # linear | attention | batch-1 | tpot | prefill
    case: str  # what was measured
    measured: float  # the published figure (seconds, or tokens/s for batch-1 rows)
    model: float  # the model at the same configuration
    unit: str
    source: str

    @property
    def off(self) -> float:
        """Relative deviation of the model from the measurement (+ = model higher)."""
        return self.model / self.measured - 1.0


def _model(name: str) -> ModelConfig:
    if name == "qwen3-1.7b":
        return ModelConfig.from_hf(QWEN3_1_7B, name)
    return shipped_config(name)


def _gpu(name: str) -> GpuSpec:
    return RTX4090 if name == "rtx4090" else gpu_spec(name)


def validation_rows(eff: Efficiencies | None = None) -> list[ValidationRow]:
    """Every comparison, in the order of the documentation's table."""
    e = eff or Efficiencies()
    h100 = gpu_spec("h100")
    rows: list[ValidationRow] = []
    llama = DecodeModel(ModelConfig.from_hf(LLAMA2_7B, "llama-2-7b"), h100, 1, e)
    for b, ms in VIDUR_LLAMA2_7B_H100_LAYER_MS.items():
        rows.append(ValidationRow("linear", f"Llama-2-7B layer, b = {b}", ms * 1e-3,
                                  float(llama.layer_linear_s(b)), "s", VIDUR_SOURCE))
    for name, (fields, table) in VIDUR_OTHER_H100_LAYER_MS.items():
        other = DecodeModel(ModelConfig.from_hf(
            {**fields, "num_hidden_layers": 1, "torch_dtype": "float16"}, name), h100, 1, e)
        short = name.split("/")[1]
        for b, ms in table.items():
            rows.append(ValidationRow(
                "linear (out of sample)", f"{short} layer, b = {b}", ms * 1e-3,
                float(other.layer_linear_s(b)), "s",
                f"microsoft/vidur data/profiling/compute/h100/{name}/mlp.csv (TP 1)"))
    mha = DecodeModel(ModelConfig.from_hf(MHA_LAYER, "mha-32x128"), h100, 1, e)
    for ctx, us in FA3_H100_US.items():
        rows.append(ValidationRow(
            "attention", f"batch {FA3_H100_BATCH} x {ctx} tokens, MHA 32x128", us * 1e-6,
            float(mha.attention_layer_s(FA3_H100_BATCH * ctx)), "s", FA3_SOURCE))
    q4 = DecodeModel(shipped_config("qwen3-4b"), h100, 1, e)
    lo, hi = PUBLISHED_4B_H100_TOK_S
    speed = 1.0 / q4.tau(1)
    nearest = min(max(speed, lo), hi)
    rows.append(ValidationRow("batch-1", f"Qwen3-4B on H100, b = 1 (published {lo:.0f}-{hi:.0f})",
                              nearest, speed, "tok/s", "docs/design.md, GPU decode model (published 4B figures)"))
    for model, gpu, tpot, src in TPOT_REFERENCES:
        dm = DecodeModel(_model(model), _gpu(gpu), 1, e)
        rows.append(ValidationRow("tpot", f"{model} on {gpu}, b = 1, ~600 tokens of context",
                                  tpot, dm.tau(1, 600), "s", src))
    rows.extend(prefill_rows(e))
    return rows


def prefill_rows(eff: Efficiencies | None = None) -> list[ValidationRow]:
    """The prefill model (``tailsieve.model.prefill``) against published time to first
    token (one uncached prompt, concurrency 1)."""
    e = eff or Efficiencies()
    llama = ModelConfig.from_hf(LLAMA33_70B, "llama-3.3-70b")
    pre = derive_prefill(llama, H100_FP8, 2, e.prefill_compute)
    return [ValidationRow("prefill", f"Llama-3.3-70B fp8 on 2 x H100 (TP2), {n:,}-token prompt",
                          ttft, pre.cost_s(n), "s", NIM_SOURCE)
            for n, ttft in NIM_LLAMA33_70B_TTFT_S.items()]


def format_value(x: float, unit: str, small: bool) -> str:
    """A published or modelled figure with its unit (us or ms for seconds)."""
    if unit != "s":
        return f"{x:.0f} {unit}"
    return f"{x * 1e6:.1f} us" if small else f"{x * 1e3:.3f} ms"


def markdown_table(rows: list[ValidationRow] | None = None) -> list[str]:
    """The validation table as markdown lines (model vs source, % off)."""
    out = ["| part | case | published | model | off | source |", "|---|---|---:|---:|---:|---|"]
    for r in rows if rows is not None else validation_rows():
        small = r.measured < 1e-3
        out.append(f"| {r.part} | {r.case} | {format_value(r.measured, r.unit, small)} | "
                   f"{format_value(r.model, r.unit, small)} | {100 * r.off:+.1f}% | {r.source} |")
    return out
