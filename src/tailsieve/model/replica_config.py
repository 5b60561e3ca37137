"""Timing parameters of one simulated or emulated replica (``ReplicaEngine``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from tailsieve.errors import ConfigError
from tailsieve.model.prefill import PrefillModel
from tailsieve.model.throughput import ThroughputModel


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Timing parameters of one replica."""

    throughput: ThroughputModel  # effective tau(b) (speculation already applied, if any)
    max_num_seqs: int | None = None  # cap on running requests; None = all admitted
    prefill_s: float = 0.0  # fixed stall per admitted request, seconds
    prefill_s_per_token: float = 0.0  # extra stall per prompt token, seconds
    kv_capacity_tokens: int | None = None  # KV slots (tokens) of the replica; None = unlimited
    recompute_s_per_token: float | None = None  # stall per token recomputed after a
    # preemption (prompt + generated), seconds; None = prefill_s_per_token
    prefill_s_per_token_pair: float = 0.0  # causal-attention stall per (prefilled token,
    # earlier token) pair of a first prefill, seconds (tailsieve.model.prefill)
    recompute_s_per_token_pair: float | None = None  # the same for a recompute or a
    # continuation's prefix; None = prefill_s_per_token_pair

    def __post_init__(self) -> None:
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < 1:
            raise ConfigError(f"kv_capacity_tokens must be >= 1, got {self.kv_capacity_tokens}")
        if self.prefill_s < 0 or self.prefill_s_per_token < 0:
            raise ConfigError("prefill costs must be >= 0")
        if self.recompute_s_per_token is not None and self.recompute_s_per_token < 0:
            raise ConfigError("recompute_s_per_token must be >= 0")
        if self.prefill_s_per_token_pair < 0 or (self.recompute_s_per_token_pair or 0.0) < 0:
            raise ConfigError("prefill/recompute s_per_token_pair must be >= 0")

    def prefill_cost_s(self, prompt_tokens: int, start: int = 0) -> float:
        """Stall of a first prefill of ``prompt_tokens`` tokens at positions ``start ..``
        (``start`` leading tokens are cached)."""
        return self.prefill_s + PrefillModel(
            self.prefill_s_per_token, self.prefill_s_per_token_pair).cost_s(prompt_tokens, start)

    def recompute_cost_s(self, tokens: int, start: int = 0) -> float:
        """Stall to prefill ``tokens`` again (a preempted request's prompt + generated tokens,
        or a continuation's uncached prefix at positions ``start ..``)."""
        per = self.prefill_s_per_token if self.recompute_s_per_token is None else (
            self.recompute_s_per_token)
        pair = self.prefill_s_per_token_pair if self.recompute_s_per_token_pair is None else (
            self.recompute_s_per_token_pair)
        return self.prefill_s + PrefillModel(per, pair).cost_s(tokens, start)

    def scaled(self, factor: float) -> ReplicaConfig:
        """The same replica ``factor`` times slower at everything it times: decode
        (``ThroughputModel.scaled``), prefill and recompute (a straggler: an older GPU, a
        throttled one, a noisy neighbour); itself at 1."""
        if factor == 1.0:
            return self
        rec, pair = self.recompute_s_per_token, self.recompute_s_per_token_pair
        return replace(self, throughput=self.throughput.scaled(factor),
                       prefill_s=self.prefill_s * factor,
                       prefill_s_per_token=self.prefill_s_per_token * factor,
                       prefill_s_per_token_pair=self.prefill_s_per_token_pair * factor,
                       recompute_s_per_token=None if rec is None else rec * factor,
                       recompute_s_per_token_pair=None if pair is None else pair * factor)

    @classmethod
    def from_profile(
        cls,
        throughput: ThroughputModel,
        *,
        max_num_seqs: int | Literal["profile"] | None = "profile",
        kv_capacity_tokens: int | Literal["profile"] | None = "profile",
        prefill_s: float = 0.0,
        prefill_s_per_token: float | Literal["profile"] = 0.0,
        recompute_s_per_token: float | Literal["profile"] = "profile",
    ) -> ReplicaConfig:
        """A replica running ``throughput``; ``"profile"`` takes the value the profile carries
        (``max_num_seqs``, ``kv_capacity_tokens``; None where it has none) and, for
        ``recompute_s_per_token``, the compute-bound prefill cost of a derived profile
        (``prefill_model_of``; 0 for a table without provenance). ``None`` switches a
        cap off. The first prefill of a request costs ``prefill_s`` + ``prefill_s_per_token``
        per prompt token (0 by default: the step model is decode-only; ``"profile"`` charges
        the profile's prefill model, attention term included). A recompute or a continuation's
        prefix costs the profile's prefill model (linear and attention terms) by default."""
        pre = prefill_model_of(throughput)
        first = pre if prefill_s_per_token == "profile" else PrefillModel(prefill_s_per_token)
        rec = pre if recompute_s_per_token == "profile" else PrefillModel(recompute_s_per_token)
        return cls(
            throughput=throughput,
            max_num_seqs=throughput.max_num_seqs if max_num_seqs == "profile" else max_num_seqs,
            kv_capacity_tokens=(throughput.kv_capacity_tokens
                                if kv_capacity_tokens == "profile" else kv_capacity_tokens),
            prefill_s=prefill_s,
            prefill_s_per_token=first.s_per_token,
            prefill_s_per_token_pair=first.s_per_token_pair,
            recompute_s_per_token=rec.s_per_token,
            recompute_s_per_token_pair=rec.s_per_token_pair,
        )


def prefill_model_of(throughput: ThroughputModel) -> PrefillModel:
    """The prefill cost a profile carries (its ``prefill`` section: ``tailsieve.model.
    prefill``). A derived profile written before that section existed gets its linear part
    from its provenance (FLOPs per token over peak x compute efficiency, no attention term);
    a table without either costs nothing (measured tables)."""
    if throughput.prefill is not None:
        return throughput.prefill
    prov = throughput.provenance
    try:
        flops = float(prov["derived"]["flops_per_token_per_gpu"])
        peak = float(prov["gpu"]["bf16_flop_per_s"]) * float(prov["efficiencies"]["compute"])
    except (KeyError, TypeError, ValueError):
        return PrefillModel(0.0)
    return PrefillModel(flops / peak if peak > 0 and flops > 0 else 0.0)
