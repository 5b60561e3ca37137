"""Timing parameters of one simulated or emulated replica (``ReplicaEngine``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailsieve.errors import ConfigError
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

    def __post_init__(self) -> None:
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < 1:
            raise ConfigError(f"kv_capacity_tokens must be >= 1, got {self.kv_capacity_tokens}")
        if self.prefill_s < 0 or self.prefill_s_per_token < 0:
            raise ConfigError("prefill costs must be >= 0")
        if self.recompute_s_per_token is not None and self.recompute_s_per_token < 0:
            raise ConfigError("recompute_s_per_token must be >= 0")

    def prefill_cost_s(self, prompt_tokens: int) -> float:
        return self.prefill_s + self.prefill_s_per_token * prompt_tokens

    def recompute_cost_s(self, tokens: int) -> float:
        """Stall to readmit a preempted request holding ``tokens`` (prompt + generated)."""
        per = self.prefill_s_per_token if self.recompute_s_per_token is None else (
            self.recompute_s_per_token)
        return self.prefill_s + per * tokens

    @classmethod
    def from_profile(
        cls,
        throughput: ThroughputModel,
        *,
        max_num_seqs: int | Literal["profile"] | None = "profile",
        kv_capacity_tokens: int | Literal["profile"] | None = "profile",
        prefill_s: float = 0.0,
        prefill_s_per_token: float = 0.0,
        recompute_s_per_token: float | Literal["profile"] = "profile",
    ) -> ReplicaConfig:
        """A replica running ``throughput``; ``"profile"`` takes the value the profile carries
        (``max_num_seqs``, ``kv_capacity_tokens``; None where it has none) and, for
        ``recompute_s_per_token``, the compute-bound prefill cost of a derived profile
        (``prefill_s_per_token_of``; 0 for a table without provenance). ``None`` switches a
        cap off. The first prefill of a request costs ``prefill_s`` + ``prefill_s_per_token``
        per prompt token (0 by default: the step model is decode-only)."""
        return cls(
            throughput=throughput,
            max_num_seqs=throughput.max_num_seqs if max_num_seqs == "profile" else max_num_seqs,
            kv_capacity_tokens=(throughput.kv_capacity_tokens
                                if kv_capacity_tokens == "profile" else kv_capacity_tokens),
            prefill_s=prefill_s,
            prefill_s_per_token=prefill_s_per_token,
            recompute_s_per_token=(prefill_s_per_token_of(throughput)
                                   if recompute_s_per_token == "profile"
                                   else recompute_s_per_token),
        )


def prefill_s_per_token_of(throughput: ThroughputModel) -> float:
    """Seconds per prefilled token of a derived profile: FLOPs per token over the GPU's dense
    bf16 FLOP/s times the compute efficiency (prefill is compute-bound; the quadratic attention
    part is left out). 0 when the profile's provenance lacks those figures (measured tables).
    The simulator charges it where vLLM prefills again: recomputing a preempted request."""
    prov = throughput.provenance
    try:
        flops = float(prov["derived"]["flops_per_token_per_gpu"])
        peak = float(prov["gpu"]["bf16_flop_per_s"]) * float(prov["efficiencies"]["compute"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    return flops / peak if peak > 0 and flops > 0 else 0.0
