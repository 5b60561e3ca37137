"""Prefill cost of a replica: compute-bound, from the model config and the GPU.

A prefill (a prompt, a continuation's prefix, or a preempted request recomputed) runs every
token through every weight matrix once and attends each token to the tokens before it:

- linear part: ``F = 2 x (active parameters - lm_head) / tp`` FLOPs per token per GPU (vLLM
  computes logits only for the last position of a prefill, so the output projection is left
  out);
- attention part (causal, full-attention layers only): the token at position ``j`` (0-based)
  multiplies its query with ``j`` keys and the attention weights with ``j`` values,
  ``4 x num_full_attention_layers x num_heads x head_dim x j / tp`` FLOPs per GPU. Over a
  prefix of ``L`` tokens that averages ``2 x n_layers x L x d_attn`` per token, the standard
  count (Kaplan et al. 2020, ``2 n_layer n_ctx d_attn``). Linear-attention layers of hybrid
  models are linear in the prefix and already inside ``F``.

Both run at ``peak bf16 FLOP/s x prefill_compute`` (``Efficiencies.prefill_compute``, 0.64:
Vidur's H100 timing of Llama-2-7B's non-attention operators on a 1,024-token chunk, the size
of a prefill chunk, reaches 0.64 x 989 TFLOP/s). Prefilling positions ``[start, end)``
(``start`` tokens already cached) therefore costs::

    s_per_token * (end - start) + s_per_token_pair * (end (end - 1) - start (start - 1)) / 2

seconds, where ``s_per_token_pair`` is the seconds per (query, earlier key) pair. This is
what a profile's ``prefill`` section holds and what ``ReplicaConfig`` charges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tailsieve.errors import ProfileError
from tailsieve.model.gpu_spec import GpuSpec
from tailsieve.model.model_config import ModelConfig


@dataclass(frozen=True, slots=True)
class PrefillModel:
    """Seconds to prefill tokens on one replica (linear + causal-attention terms)."""

    s_per_token: float  # seconds per prefilled token (the weight GEMMs), per replica
    s_per_token_pair: float = 0.0  # seconds per (query token, earlier token) attention pair

    def __post_init__(self) -> None:
        for label in ("s_per_token", "s_per_token_pair"):
            v = getattr(self, label)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0:
                raise ProfileError(f"prefill {label} must be a finite number >= 0, got {v!r}")

    def cost_s(self, num_tokens: float, start: float = 0.0) -> float:
        """Seconds to prefill ``num_tokens`` tokens at positions ``start .. start +
        num_tokens - 1`` (``start`` leading tokens are already in the KV cache)."""
        n = max(float(num_tokens), 0.0)
        if n == 0:
            return 0.0
        s = max(float(start), 0.0)
        end = s + n
        pairs = (end * (end - 1.0) - s * (s - 1.0)) / 2.0
        return self.s_per_token * n + self.s_per_token_pair * pairs

    def tokens_per_s(self, prompt_tokens: int) -> float:
        """Prefill throughput of one uncached prompt of ``prompt_tokens`` tokens."""
        return prompt_tokens / self.cost_s(prompt_tokens) if prompt_tokens > 0 else 0.0

    def scaled(self, factor: float) -> PrefillModel:
        return PrefillModel(self.s_per_token * factor, self.s_per_token_pair * factor)

    def to_dict(self) -> dict[str, float]:
        return {"s_per_token": self.s_per_token, "s_per_token_pair": self.s_per_token_pair}

    @classmethod
    def from_dict(cls, data: Any, where: str = "profile") -> PrefillModel:
        if not isinstance(data, dict) or "s_per_token" not in data:
            raise ProfileError(f"{where}: 'prefill' must be an object with 's_per_token' "
                               "(and optionally 's_per_token_pair')")
        try:
            return cls(data["s_per_token"], data.get("s_per_token_pair", 0.0))
        except ProfileError as exc:
            raise ProfileError(f"{where}: {exc}") from None


def derive_prefill(model: ModelConfig, gpu: GpuSpec, tp: int = 1,
                   prefill_compute: float = 0.64) -> PrefillModel:
    """The prefill cost of ``model`` on ``tp`` GPUs of kind ``gpu`` (see the module doc)."""
    rate = gpu.bf16_flop_per_s * prefill_compute
    linear_flops = 2.0 * (model.active_params - model.lm_head_params) / tp
    pair_flops = (4.0 * model.num_full_attention_layers * model.num_heads * model.head_dim
                  / tp)
    return PrefillModel(linear_flops / rate, pair_flops / rate)
