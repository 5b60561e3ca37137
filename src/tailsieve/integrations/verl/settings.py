"""The ``tailsieve:`` section of a verl config, read without importing verl.

::

    tailsieve:
      num_groups: 64          # N groups per training step (default: data.train_batch_size)
      policy: tailsieve       # tailsieve | tailsieve-fixed | uniform | uniform-requests
      endpoints: []           # [] = the servers verl launched; else "http://host:port" URLs
      backend: null           # vllm | sglang (default: actor_rollout_ref.rollout.name)
      model: null             # served model name for vLLM (default: the server's first model)
      profile: auto           # controller cost model: auto (fitted online), auto:NAME, or a
                              # profile name / JSON path (fixed)
      controller: {}          # ControllerConfig overrides
      request_timeout_s: 3600.0
      split_groups: true      # n single requests per group (exact abort evidence)
      moves: true             # move running responses between replicas while a step runs
      piece_tokens: null      # moves on vLLM, unstreamed: tokens per piece (null: 512)
      stream: false           # stream responses (vLLM: a move keeps what was streamed)
      stream_interval: null   # stream on vLLM: tokens per streamed chunk (e.g. 64)
      seam_s: null            # cost of one move beyond its prefill, s (null: controller's 0.05)

Keys new to verl's schema are set with ``++tailsieve.KEY=VALUE`` on the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.integrations.settings_values import POLICIES, flag, optional, sampling, with_seam
from tailsieve.runtime.engine.backends import Backend, SamplingParams
from tailsieve.runtime.step.rollout_config import RolloutConfig

KEYS = (
    "num_groups",
    "policy",
    "endpoints",
    "backend",
    "model",
    "profile",
    "controller",
    "request_timeout_s",
    "split_groups",
    "moves",
    "piece_tokens",
    "stream",
    "stream_interval",
    "seam_s",
)


@dataclass(frozen=True, slots=True)
class VerlSettings:
    """TailSieve settings for verl, resolved against verl's rollout config."""

    num_groups: int  # N: groups per training step
    group_size: int  # n: actor_rollout_ref.rollout.n
    prompt_length: int  # rollout.prompt_length: left-padded prompt width, tokens
    response_length: int  # rollout.response_length: right-padded response width, tokens
    backend: Backend = Backend.VLLM
    policy: str = "tailsieve"
    endpoints: tuple[str, ...] = ()  # empty: ask verl's load balancer for its servers
    model: str | None = None  # served model name (None: discover from /v1/models)
    profile: str = "auto"  # the controller's cost model (RolloutConfig.profile)
    controller: dict[str, Any] = field(default_factory=dict)
    request_timeout_s: float = 3600.0
    split_groups: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k (verl's convention)
    moves: bool = True  # move running responses between replicas while a step runs
    piece_tokens: int | None = None  # moves on vLLM, unstreamed: tokens per piece (None: 512)
    stream: bool = False  # streamed responses (vLLM: a move keeps what was streamed)
    stream_interval: int | None = None  # stream on vLLM: tokens per streamed chunk
    seam_s: float | None = None  # cost of one move beyond its prefill, seconds

    def __post_init__(self) -> None:
        if self.num_groups < 1 or self.group_size < 1:
            raise ConfigError(
                f"tailsieve.num_groups ({self.num_groups}) and rollout.n ({self.group_size}) "
                "must be >= 1"
            )
        if self.prompt_length < 1 or self.response_length < 1:
            raise ConfigError("rollout.prompt_length and rollout.response_length must be >= 1")
        if self.policy not in POLICIES:
            raise ConfigError(f"tailsieve.policy must be one of {POLICIES}, got {self.policy!r}")
        for url in self.endpoints:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"tailsieve.endpoints: {url!r} is not an http(s) URL")
        if self.piece_tokens is not None and self.piece_tokens < 1:
            raise ConfigError(f"tailsieve.piece_tokens must be >= 1, got {self.piece_tokens}")
        if self.stream_interval is not None and (self.stream_interval < 1 or not self.stream):
            raise ConfigError(
                f"tailsieve.stream_interval ({self.stream_interval}) needs tailsieve.stream=true "
                "and a value >= 1"
            )
        if self.seam_s is not None and self.seam_s < 0:
            raise ConfigError(f"tailsieve.seam_s must be >= 0, got {self.seam_s}")
        if self.piece_tokens is not None and not self.moves:
            raise ConfigError("tailsieve.piece_tokens needs tailsieve.moves=true")

    @classmethod
    def from_verl(cls, config: Any) -> VerlSettings:
        """From verl's whole (OmegaConf) config: ``tailsieve`` plus ``actor_rollout_ref.rollout``."""
        ts = _as_dict(config.get("tailsieve") or {})
        unknown = sorted(set(ts) - set(KEYS))
        if unknown:
            raise ConfigError(f"tailsieve: unknown keys {unknown}; known: {list(KEYS)}")
        rollout = config.actor_rollout_ref.rollout
        backend = ts.get("backend") or str(rollout.name)
        if backend not in ("vllm", "sglang"):
            raise ConfigError(
                f"tailsieve.backend must be vllm or sglang, got {backend!r} "
                "(set tailsieve.backend when actor_rollout_ref.rollout.name is another engine)"
            )
        num_groups = ts.get("num_groups") or config.data.train_batch_size
        return cls(
            num_groups=int(num_groups),
            group_size=int(rollout.n),
            prompt_length=int(rollout.prompt_length),
            response_length=int(rollout.response_length),
            backend=Backend(backend),
            policy=str(ts.get("policy", "tailsieve")),
            endpoints=tuple(str(u).rstrip("/") for u in ts.get("endpoints") or ()),
            model=ts.get("model"),
            profile=str(ts.get("profile", "auto")),
            controller=dict(ts.get("controller") or {}),
            request_timeout_s=float(ts.get("request_timeout_s", 3600.0)),
            split_groups=bool(ts.get("split_groups", True)),
            moves=flag(ts.get("moves", True), "tailsieve.moves"),
            piece_tokens=optional(ts.get("piece_tokens"), int, "tailsieve.piece_tokens"),
            stream=flag(ts.get("stream", False), "tailsieve.stream"),
            stream_interval=optional(ts.get("stream_interval"), int, "tailsieve.stream_interval"),
            seam_s=optional(ts.get("seam_s"), float, "tailsieve.seam_s"),
            temperature=float(rollout.temperature),
            top_p=float(rollout.top_p),
            top_k=int(rollout.top_k),
        )

    def sampling(self, temperature: float | None = None) -> SamplingParams:
        """Sampling of every request: verl's temperature/top_p/top_k, response_length tokens,
        and the sampled tokens' log-probabilities (verl's ``rollout_log_probs``)."""
        return sampling(self.response_length,
                        self.temperature if temperature is None else temperature, self.top_p,
                        self.top_k)

    def rollout_config(
        self, model: str, num_groups: int | None = None, group_size: int | None = None, **kw: Any
    ) -> RolloutConfig:
        """The ``RolloutConfig`` of the training rollout (or of a one-off validation rollout
        when ``num_groups``/``group_size``/``policy`` are given)."""
        args: dict[str, Any] = {
            "num_groups": num_groups or self.num_groups,
            "group_size": group_size or self.group_size,
            "policy": self.policy,
            "backend": self.backend,
            "model": model,
            "sampling": self.sampling(),
            "profile": self.profile,
            "split_groups": self.split_groups,
            "request_timeout_s": self.request_timeout_s,
            "controller": with_seam(self.controller, self.seam_s, "tailsieve.seam_s"),
            "moves": self.moves,
            "piece_tokens": self.piece_tokens,
            "stream": self.stream,
            "stream_interval": self.stream_interval,
        }
        args.update(kw)
        if args["policy"] != "tailsieve":
            args["piece_tokens"] = None  # pieces only serve moves
        return RolloutConfig(**args)


def _as_dict(section: Any) -> dict[str, Any]:
    if isinstance(section, Mapping):
        return {str(k): v for k, v in section.items()}
    try:
        from omegaconf import OmegaConf

        out = OmegaConf.to_container(section, resolve=True)
    except Exception as exc:
        raise ConfigError(f"tailsieve: expected a mapping, got {type(section).__name__}") from exc
    if not isinstance(out, dict):
        raise ConfigError(f"tailsieve: expected a mapping, got {type(out).__name__}")
    return {str(k): v for k, v in out.items()}
