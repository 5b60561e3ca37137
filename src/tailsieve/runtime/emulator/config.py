"""Validated configuration of one emulated replica server."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_config import prefill_model_of
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel

CrashMode = Literal["exit", "close"]
CRASH_MODES: tuple[CrashMode, ...] = ("exit", "close")
CRASH_EXIT_CODE = 70  # process exit status of an injected ``exit`` crash


SCHEDULING_POLICIES = ("fcfs", "priority")  # vLLM's --scheduling-policy values

@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """Everything that shapes an emulated vLLM replica's behaviour.

    Timing: a request's tokens are produced by ``model.replica_engine.ReplicaEngine`` with
    ``throughput`` (times ``slowdown``); one model second lasts ``time_scale`` real seconds.
    Prefill: the uncached part of a prompt that carries generated tokens (a later turn's
    context, a continued response) stalls decoding for the profile's prefill model, attention
    term included, as chunked prefill delays the running requests; a new prompt's costs
    ``prefill_s`` + ``prefill_s_per_token`` per token (none by default: the decode-only step
    model), or the profile's prefill model with ``prefill_profile``.
    Lengths: ``ignore_eos=true`` requests produce exactly ``max_tokens``; otherwise a length is
    drawn from ``LogNormal(log(length_median_tokens), length_sigma)``, rounded, clipped to
    ``[1, max_tokens]``.
    """

    throughput: ThroughputModel  # tau(b), seconds per decode step at batch b
    model_name: str = "tailsieve-emulated"  # served model id (``model`` in requests/responses)
    time_scale: float = 1.0  # real seconds per model second (0.01: 100x faster than the model)
    max_num_seqs: int | None = 256  # running-sequence cap (vLLM's --max-num-seqs); None = no cap
    kv_capacity_tokens: int | None = None  # KV-cache tokens; when full the newest is preempted
    max_model_len: int = 4096  # prompt + completion token limit per sequence, tokens
    prefill_s: float = 0.0  # model seconds of prefill stall per admitted sequence
    prefill_s_per_token: float = 0.0  # extra model seconds of stall per prompt token
    prefill_profile: bool = False  # True: a new prompt's uncached tokens also cost the
    # profile's prefill model (as a later turn's context or a continuation's always do);
    # False: a new prompt costs ``prefill_s`` + ``prefill_s_per_token`` per token
    prompt_tokens_details: bool = False  # report each request's cached prompt tokens in
    # ``usage.prompt_tokens_details`` (vLLM's --enable-prompt-tokens-details)
    seed: int = 0  # seeds drawn lengths (requests without a ``seed``) and injected errors
    length_median_tokens: float = 256.0  # median of the drawn response length, tokens
    length_sigma: float = 1.0  # log-space standard deviation of the drawn length
    crash_after_s: float | None = None  # real seconds after start until an injected crash
    crash_mode: CrashMode = "close"  # "exit": os._exit the process; "close": drop everything
    error_rate: float = 0.0  # probability a generation request gets HTTP 500
    slowdown: float = 1.0  # multiplies every tau (a straggler replica when > 1)
    scheduling_policy: str = "fcfs"  # vLLM's --scheduling-policy: "fcfs", or "priority"
    # (requests carry ``priority``, lower first; the waiting queue and the preemption victim
    # by (priority, arrival), as vLLM V1 schedules them: ``model.replica_engine``)

    def __post_init__(self) -> None:
        if not isinstance(self.throughput, ThroughputModel):
            raise ConfigError("throughput must be a ThroughputModel (see load_profile)")
        if not self.model_name or any(c.isspace() for c in self.model_name):
            raise ConfigError(f"model_name must be non-empty without spaces: {self.model_name!r}")
        _positive("time_scale", self.time_scale)
        _positive("slowdown", self.slowdown)
        _positive("length_median_tokens", self.length_median_tokens)
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < 1:
            raise ConfigError(f"kv_capacity_tokens must be >= 1, got {self.kv_capacity_tokens}")
        if self.max_model_len < 2:
            raise ConfigError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.prefill_profile and self.prefill_s_per_token:
            raise ConfigError(
                "give prefill_profile or prefill_s_per_token, not both: prefill_profile "
                f"charges the profile's prefill model (got prefill_s_per_token="
                f"{self.prefill_s_per_token!r})"
            )
        for name in ("prefill_s", "prefill_s_per_token", "length_sigma"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {v!r}")
        if not (math.isfinite(self.error_rate) and 0.0 <= self.error_rate <= 1.0):
            raise ConfigError(f"error_rate must be in [0, 1], got {self.error_rate!r}")
        if self.crash_after_s is not None:
            _positive("crash_after_s", self.crash_after_s, allow_zero=True)
        if self.crash_mode not in CRASH_MODES:
            raise ConfigError(f"crash_mode must be one of {CRASH_MODES}, got {self.crash_mode!r}")
        if self.seed < 0:
            raise ConfigError(f"seed must be >= 0, got {self.seed}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ConfigError(f"scheduling_policy must be one of {SCHEDULING_POLICIES}, got "
                              f"{self.scheduling_policy!r}")

    @classmethod
    def from_profile(cls, profile: str | Path, **kwargs: object) -> EmulatorConfig:
        """Build from a shipped profile name or a profile JSON path. ``max_num_seqs`` and
        ``kv_capacity_tokens`` default to the profile's (when it has them)."""
        model = load_profile(profile)
        if "max_num_seqs" not in kwargs and model.max_num_seqs is not None:
            kwargs["max_num_seqs"] = model.max_num_seqs
        kwargs.setdefault("kv_capacity_tokens", model.kv_capacity_tokens)
        return cls(throughput=model, **kwargs)  # type: ignore[arg-type]

    def replica_config(self) -> ReplicaConfig:
        """The engine configuration: the profile slowed by ``slowdown``, plus caps, prefill and
        KV capacity (a preempted request's recompute costs ``prefill_s_per_token`` per token,
        or, when that is 0, the profile's prefill model, attention term included; a first
        prefill costs the profile's model too with ``prefill_profile``)."""
        tp = self.throughput if self.slowdown == 1.0 else self.throughput.scaled(self.slowdown)
        pre = prefill_model_of(tp)
        recompute = self.prefill_s_per_token or pre.s_per_token
        pair = 0.0 if self.prefill_s_per_token else pre.s_per_token_pair
        first = pre.s_per_token if self.prefill_profile else self.prefill_s_per_token
        first_pair = pre.s_per_token_pair if self.prefill_profile else 0.0
        return ReplicaConfig(
            throughput=tp,
            max_num_seqs=self.max_num_seqs,
            prefill_s=self.prefill_s,
            prefill_s_per_token=first,
            prefill_s_per_token_pair=first_pair,
            recompute_s_per_token=recompute,
            recompute_s_per_token_pair=pair,
            kv_capacity_tokens=self.kv_capacity_tokens,
        )


def _positive(name: str, v: float, allow_zero: bool = False) -> None:
    ok = isinstance(v, (int, float)) and math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be a finite number {bound}, got {v!r}")
