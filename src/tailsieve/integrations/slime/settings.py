"""TailSieve settings for slime, read from slime's ``args`` (a ``--custom-config-path`` YAML sets
them as attributes) or from the environment::

    # tailsieve.yaml, passed with --custom-config-path tailsieve.yaml
    tailsieve_policy: tailsieve        # tailsieve | tailsieve-fixed | uniform
    tailsieve_endpoints: []            # [] = ask slime's router (GET /workers) for its workers
    tailsieve_profile: qwen3-4b-h100          # throughput profile of the controller
    tailsieve_controller: {}           # ControllerConfig overrides

Environment fallbacks: ``TAILSIEVE_POLICY``, ``TAILSIEVE_ENDPOINTS`` (comma-separated),
``TAILSIEVE_PROFILE``. Batch shape and sampling come from slime's own flags:
``--rollout-batch-size`` (N), ``--n-samples-per-prompt`` (n), ``--rollout-max-response-len``,
``--rollout-temperature``, ``--rollout-top-p``, ``--rollout-top-k``, ``--rollout-stop``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.backends import Backend, SamplingParams
from tailsieve.runtime.rollout import RolloutConfig

POLICIES = ("tailsieve", "tailsieve-fixed", "uniform")


@dataclass(frozen=True, slots=True)
class SlimeSettings:
    """What one slime rollout step asks of TailSieve."""

    num_groups: int  # N = --rollout-batch-size
    group_size: int  # n = --n-samples-per-prompt
    max_new_tokens: int  # --rollout-max-response-len
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k
    stop: tuple[str, ...] = ()
    policy: str = "tailsieve"
    endpoints: tuple[str, ...] = ()  # empty: the router's workers
    router_url: str | None = None  # http://{sglang_router_ip}:{sglang_router_port}
    profile: str = "qwen3-4b-h100"
    controller: dict[str, Any] = field(default_factory=dict)
    request_timeout_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.num_groups < 1 or self.group_size < 1:
            raise ConfigError(
                f"--rollout-batch-size ({self.num_groups}) and --n-samples-per-prompt "
                f"({self.group_size}) must be >= 1"
            )
        if self.max_new_tokens < 1:
            raise ConfigError(f"--rollout-max-response-len must be >= 1, got {self.max_new_tokens}")
        if self.policy not in POLICIES:
            raise ConfigError(f"tailsieve_policy must be one of {POLICIES}, got {self.policy!r}")
        if not self.endpoints and not self.router_url:
            raise ConfigError(
                "no SGLang workers: set tailsieve_endpoints (or TAILSIEVE_ENDPOINTS) or run "
                "slime's router (--sglang-router-ip/--sglang-router-port)"
            )

    @classmethod
    def from_args(cls, args: Any) -> SlimeSettings:
        def opt(name: str, env: str, default: Any) -> Any:
            v = getattr(args, name, None)
            return v if v is not None else os.environ.get(env, default)

        eps = opt("tailsieve_endpoints", "TAILSIEVE_ENDPOINTS", "")
        if isinstance(eps, str):
            eps = [e for e in eps.split(",") if e.strip()]
        ip, port = (
            getattr(args, "sglang_router_ip", None),
            getattr(args, "sglang_router_port", None),
        )
        stop = getattr(args, "rollout_stop", None) or ()
        return cls(
            num_groups=int(args.rollout_batch_size),
            group_size=int(args.n_samples_per_prompt),
            max_new_tokens=int(args.rollout_max_response_len),
            temperature=float(getattr(args, "rollout_temperature", 1.0)),
            top_p=float(getattr(args, "rollout_top_p", 1.0)),
            top_k=int(getattr(args, "rollout_top_k", -1)),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            policy=str(opt("tailsieve_policy", "TAILSIEVE_POLICY", "tailsieve")),
            endpoints=tuple(str(e).strip().rstrip("/") for e in eps),
            router_url=f"http://{ip}:{port}" if ip and port else None,
            profile=str(opt("tailsieve_profile", "TAILSIEVE_PROFILE", "qwen3-4b-h100")),
            controller=dict(getattr(args, "tailsieve_controller", None) or {}),
        )

    def rollout_config(self) -> RolloutConfig:
        """SGLang ``/generate``, one request per sample, log-probs of the sampled tokens."""
        return RolloutConfig(
            num_groups=self.num_groups,
            group_size=self.group_size,
            policy=self.policy,
            backend=Backend.SGLANG,
            sampling=SamplingParams(
                max_tokens=self.max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p if 0.0 < self.top_p < 1.0 else None,
                top_k=self.top_k if self.top_k > 0 else None,
                stop=self.stop or None,
                logprobs=0,
                extra={"no_stop_trim": True, "spaces_between_special_tokens": False},
            ),
            profile=self.profile,
            controller=self.controller,
            request_timeout_s=self.request_timeout_s,
        )
