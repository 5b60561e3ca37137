"""TailSieve settings for slime, read from slime's ``args`` (a ``--custom-config-path`` YAML sets
them as attributes) or from the environment::

    # tailsieve.yaml, passed with --custom-config-path tailsieve.yaml
    tailsieve_policy: tailsieve        # tailsieve | tailsieve-fixed | uniform | uniform-requests
    tailsieve_endpoints: []            # [] = ask slime's router (GET /workers) for its workers
    tailsieve_profile: auto            # controller cost model: auto (fitted online), auto:NAME,
                                       # or a profile name / JSON path (fixed)
    tailsieve_controller: {}           # ControllerConfig overrides
    tailsieve_moves: true              # move running responses between SGLang workers
    tailsieve_piece_tokens: null       # tokens per piece (null: one piece until moved)
    tailsieve_seam_s: null             # cost of one move beyond its prefill, s (null: 0.05)

Environment fallbacks: ``TAILSIEVE_POLICY``, ``TAILSIEVE_ENDPOINTS`` (comma-separated),
``TAILSIEVE_PROFILE``, ``TAILSIEVE_MOVES`` (``0``/``1``), ``TAILSIEVE_PIECE_TOKENS``,
``TAILSIEVE_SEAM_S``. On SGLang a move aborts the running request by id and keeps its partial
output, so no pieces are needed (and SGLang's ``/generate`` does not stream chunks the way
vLLM's ``stream_interval`` does: there is no streaming key). Batch shape and sampling come from slime's own flags:
``--rollout-batch-size`` (N), ``--n-samples-per-prompt`` (n), ``--rollout-max-response-len``,
``--rollout-temperature``, ``--rollout-top-p``, ``--rollout-top-k``, ``--rollout-stop``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.integrations.settings_values import POLICIES, flag, optional, sampling, with_seam
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.step.rollout_config import RolloutConfig


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
    profile: str = "auto"  # the controller's cost model (RolloutConfig.profile)
    controller: dict[str, Any] = field(default_factory=dict)
    request_timeout_s: float = 3600.0
    moves: bool = True  # move running responses between workers while a step runs
    piece_tokens: int | None = None  # tokens per piece (None: one piece until moved)
    seam_s: float | None = None  # cost of one move beyond its prefill, seconds

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
        if self.piece_tokens is not None and (self.piece_tokens < 1 or not self.moves):
            raise ConfigError(f"tailsieve_piece_tokens ({self.piece_tokens}) must be >= 1 and "
                              "needs tailsieve_moves on")
        if self.seam_s is not None and self.seam_s < 0:
            raise ConfigError(f"tailsieve_seam_s must be >= 0, got {self.seam_s}")
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
            profile=str(opt("tailsieve_profile", "TAILSIEVE_PROFILE", "auto")),
            controller=dict(getattr(args, "tailsieve_controller", None) or {}),
            moves=flag(opt("tailsieve_moves", "TAILSIEVE_MOVES", True), "tailsieve_moves"),
            piece_tokens=optional(opt("tailsieve_piece_tokens", "TAILSIEVE_PIECE_TOKENS", None), int,
                              "tailsieve_piece_tokens"),
            seam_s=optional(opt("tailsieve_seam_s", "TAILSIEVE_SEAM_S", None), float,
                        "tailsieve_seam_s"),
        )

    def rollout_config(self) -> RolloutConfig:
        """SGLang ``/generate``, one request per sample, log-probs of the sampled tokens."""
        return RolloutConfig(
            num_groups=self.num_groups,
            group_size=self.group_size,
            policy=self.policy,
            backend=Backend.SGLANG,
            sampling=sampling(
                self.max_new_tokens, self.temperature, self.top_p, self.top_k,
                stop=self.stop or None,
                extra={"no_stop_trim": True, "spaces_between_special_tokens": False},
            ),
            profile=self.profile,
            controller=with_seam(self.controller, self.seam_s, "tailsieve_seam_s"),
            request_timeout_s=self.request_timeout_s,
            moves=self.moves,
            piece_tokens=self.piece_tokens if self.policy == "tailsieve" else None,
        )

