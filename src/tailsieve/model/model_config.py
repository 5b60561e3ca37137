"""The architecture facts of a model, read from its Hugging Face ``config.json``.

Only what the decode model needs: layer count and widths, attention heads, MoE experts, the
hybrid layout (which layers are full attention; the rest are linear attention with a fixed
state per sequence, as in Qwen3-Next / Qwen3.5), embeddings and dtype. Multimodal configs keep
the language model under ``text_config``; its fields win over the top level. Parameter counts
cover the language model only (a vision tower is not read during decoding).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailsieve.errors import ConfigError

DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4,
                               "float": 4, "float8_e4m3fn": 1, "fp8": 1}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A decoder-only transformer (dense or MoE, full or hybrid attention)."""

    name: str
    num_layers: int  # decoder layers
    hidden_size: int
    num_heads: int  # query heads of a full-attention layer
    num_kv_heads: int  # key/value heads of a full-attention layer
    head_dim: int
    intermediate_size: int  # dense FFN width (0 when every layer is MoE)
    vocab_size: int
    tie_word_embeddings: bool  # lm_head shares the embedding matrix
    dtype_bytes: int  # bytes per weight and per KV element
    num_full_attention_layers: int  # layers with a KV cache (== num_layers unless hybrid)
    attn_output_gate: bool = False  # q_proj also emits a gate (doubles its width; Qwen3.5)
    num_experts: int = 0  # routed experts per MoE layer (0: dense)
    num_experts_per_tok: int = 0  # experts each token is routed to
    moe_intermediate_size: int = 0  # width of one routed expert
    shared_expert_intermediate_size: int = 0  # width of the always-on shared expert (0: none)
    linear_num_key_heads: int = 0  # linear-attention layers (hybrid models)
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0

    def __post_init__(self) -> None:
        for label in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                      "vocab_size", "dtype_bytes"):
            if getattr(self, label) < 1:
                raise ConfigError(f"{self.name}: {label} must be >= 1, got {getattr(self, label)}")
        if not 0 <= self.num_full_attention_layers <= self.num_layers:
            raise ConfigError(f"{self.name}: full-attention layers "
                              f"({self.num_full_attention_layers}) outside 0..num_layers")
        if self.is_moe and not (0 < self.num_experts_per_tok <= self.num_experts
                                and self.moe_intermediate_size > 0):
            raise ConfigError(f"{self.name}: MoE needs 0 < num_experts_per_tok <= num_experts and "
                              "moe_intermediate_size > 0")
        if not self.is_moe and self.intermediate_size < 1:
            raise ConfigError(f"{self.name}: intermediate_size must be >= 1 for a dense model")
        if self.num_linear_attention_layers and min(
                self.linear_num_key_heads, self.linear_num_value_heads,
                self.linear_key_head_dim, self.linear_value_head_dim) < 1:
            raise ConfigError(f"{self.name}: hybrid model without linear_num_key_heads / "
                              "linear_num_value_heads / linear_key_head_dim / linear_value_head_dim")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_linear_attention_layers(self) -> int:
        return self.num_layers - self.num_full_attention_layers

    # ---- parameters (counts, not bytes) ----
    @property
    def full_attention_params(self) -> int:
        """q/k/v/o projections of one full-attention layer."""
        q = self.num_heads * self.head_dim * (2 if self.attn_output_gate else 1)
        kv = 2 * self.num_kv_heads * self.head_dim
        return self.hidden_size * (q + kv) + self.num_heads * self.head_dim * self.hidden_size

    @property
    def linear_attention_params(self) -> int:
        """Projections and short convolution of one linear-attention (gated delta net) layer."""
        kd = self.linear_num_key_heads * self.linear_key_head_dim
        vd = self.linear_num_value_heads * self.linear_value_head_dim
        in_proj = self.hidden_size * (2 * kd + 2 * vd + 2 * self.linear_num_value_heads)
        conv = (2 * kd + vd) * self.linear_conv_kernel_dim
        return in_proj + conv + vd * self.hidden_size

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """One routed expert (gated MLP)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_mlp_params(self) -> int:
        """Per-layer MLP weights every token reads: the dense FFN, or the MoE's router and
        shared expert."""
        if not self.is_moe:
            return self.dense_mlp_params
        return (self.hidden_size * self.num_experts
                + 3 * self.hidden_size * self.shared_expert_intermediate_size)

    @property
    def attention_params_total(self) -> int:
        return (self.num_full_attention_layers * self.full_attention_params
                + self.num_linear_attention_layers * self.linear_attention_params)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection (read every step even when tied to the embedding)."""
        return self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> int:
        """Parameters held in memory (language model; norms ignored)."""
        experts = self.num_layers * self.num_experts * self.expert_params
        untied = 0 if self.tie_word_embeddings else self.lm_head_params
        return (self.attention_params_total + self.num_layers * self.shared_mlp_params + experts
                + self.embedding_params + untied)

    @property
    def active_params(self) -> int:
        """Parameters one token multiplies through (FLOPs per token = 2 x this)."""
        experts = self.num_layers * self.num_experts_per_tok * self.expert_params
        return (self.attention_params_total + self.num_layers * self.shared_mlp_params + experts
                + self.lm_head_params)

    # ---- per-token and per-sequence state ----
    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one context token holds (all full-attention layers, K and V)."""
        return 2 * self.num_full_attention_layers * self.num_kv_heads * self.head_dim * \
            self.dtype_bytes

    @property
    def linear_state_bytes_per_seq(self) -> int:
        """Fixed recurrent state of one sequence over all linear-attention layers: the
        ``value_heads x key_dim x value_dim`` matrix plus the convolution window."""
        if self.num_linear_attention_layers == 0:
            return 0
        kd = self.linear_num_key_heads * self.linear_key_head_dim
        vd = self.linear_num_value_heads * self.linear_value_head_dim
        ssm = self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        conv = (2 * kd + vd) * max(self.linear_conv_kernel_dim - 1, 0)
        return self.num_linear_attention_layers * (ssm + conv) * self.dtype_bytes

    # ---- parsing ----
    @classmethod
    def from_hf(cls, data: Any, name: str = "model") -> ModelConfig:
        """Parse a Hugging Face ``config.json`` object; errors name the bad field."""
        if not isinstance(data, dict):
            raise ConfigError(f"{name}: config.json must be a JSON object")
        text = data.get("text_config")
        if text is not None and not isinstance(text, dict):
            raise ConfigError(f"{name}: field 'text_config' must be an object")
        merged: dict[str, Any] = {**data, **(text or {})}
        r = _Reader(merged, name)
        layers = r.int("num_hidden_layers")
        hidden = r.int("hidden_size")
        heads = r.int("num_attention_heads")
        kv_heads = r.int("num_key_value_heads", default=heads)
        head_dim = r.int("head_dim", default=None)
        if head_dim is None:
            if hidden % heads:
                raise ConfigError(f"{name}: field 'head_dim' missing and hidden_size {hidden} is "
                                  f"not a multiple of num_attention_heads {heads}")
            head_dim = hidden // heads
        experts = r.int("num_experts", default=0, minimum=0)
        if experts == 0:
            experts = r.int("n_routed_experts", default=0, minimum=0)
        moe = experts > 0
        full_layers = _full_attention_layers(merged, layers, name)
        hybrid = full_layers < layers
        return cls(
            name=name,
            num_layers=layers,
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=r.int("intermediate_size", default=0 if moe else REQUIRED, minimum=0),
            vocab_size=r.int("vocab_size"),
            tie_word_embeddings=r.bool("tie_word_embeddings", default=False),
            dtype_bytes=_dtype_bytes(merged, name),
            num_full_attention_layers=full_layers,
            attn_output_gate=r.bool("attn_output_gate", default=hybrid),
            num_experts=experts,
            num_experts_per_tok=r.int("num_experts_per_tok", default=0 if not moe else REQUIRED,
                                      minimum=0),
            moe_intermediate_size=r.int("moe_intermediate_size", default=0 if not moe else REQUIRED,
                                        minimum=0),
            shared_expert_intermediate_size=r.int("shared_expert_intermediate_size", default=0,
                                                  minimum=0),
            linear_num_key_heads=r.int("linear_num_key_heads", default=0 if not hybrid else REQUIRED,
                                       minimum=0),
            linear_num_value_heads=r.int("linear_num_value_heads",
                                         default=0 if not hybrid else REQUIRED, minimum=0),
            linear_key_head_dim=r.int("linear_key_head_dim", default=0 if not hybrid else REQUIRED,
                                      minimum=0),
            linear_value_head_dim=r.int("linear_value_head_dim",
                                        default=0 if not hybrid else REQUIRED, minimum=0),
            linear_conv_kernel_dim=r.int("linear_conv_kernel_dim", default=4 if hybrid else 0,
                                         minimum=0),
        )

    @classmethod
    def load(cls, path: str | Path, name: str | None = None) -> ModelConfig:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"model config not found: {p}")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        label = name or (p.parent.name if p.name == "config.json" else p.stem)
        return cls.from_hf(data, name=label)


REQUIRED: Any = object()  # marks a field without a default


class _Reader:
    """Typed field access with errors that name the field."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data = data
        self.where = where

    def int(self, key: str, default: Any = REQUIRED, minimum: int = 1) -> Any:
        """The integer at ``key``; ``default`` when absent (an error when it is ``REQUIRED``)."""
        if key not in self.data or self.data[key] is None:
            if default is REQUIRED:
                raise ConfigError(f"{self.where}: missing field '{key}'")
            return default
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v != int(v) or v < minimum:
            raise ConfigError(f"{self.where}: field '{key}' must be an integer >= {minimum}, "
                              f"got {v!r}")
        return int(v)

    def bool(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(f"{self.where}: field '{key}' must be true or false, got {v!r}")
        return v


def _full_attention_layers(data: dict[str, Any], layers: int, where: str) -> int:
    types = data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or \
                not all(isinstance(t, str) for t in types):
            raise ConfigError(f"{where}: field 'layer_types' must be a list of {layers} strings")
        unknown = sorted({t for t in types} - {"full_attention", "linear_attention",
                                                "sliding_attention"})
        if unknown:
            raise ConfigError(f"{where}: field 'layer_types' has unknown entries {unknown}")
        return sum(t != "linear_attention" for t in types)
    interval = data.get("full_attention_interval")
    if interval is None:
        return layers
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise ConfigError(f"{where}: field 'full_attention_interval' must be an integer >= 1, "
                          f"got {interval!r}")
    return layers // interval


def _dtype_bytes(data: dict[str, Any], where: str) -> int:
    for key in ("torch_dtype", "dtype"):
        v = data.get(key)
        if v is None:
            continue
        if not isinstance(v, str) or v.replace("torch.", "") not in DTYPE_BYTES:
            raise ConfigError(f"{where}: field '{key}' must be one of {', '.join(DTYPE_BYTES)}, "
                              f"got {v!r}")
        return DTYPE_BYTES[v.replace("torch.", "")]
    return 2  # Hugging Face checkpoints without a dtype field are served in bf16 by vLLM
