"""``ProxyConfig``: what ``tailsieve serve`` runs with, and how a request names its session."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.session.client_table import DEFAULT_TTL_S

RESERVED_PATHS = ("/v1/completions", "/v1/chat/completions", "/generate", "/tokenize",
                  "/detokenize", "/workers", "/add_worker", "/abort_request",
                  "/finish_session")
SESSION_HEADERS = ("X-Session-ID", "X-SMG-Routing-Key")  # ours, then the SGLang Model
# Gateway's routing key (what slime sends with --router-policy consistent_hashing)
GROUP_HEADERS = ("X-Group-ID",)  # a GRPO group's samples sent as separate sessions
FAN_OUT_PATHS = ("/update_weights", "/reload_weights", "/update_weights_from_disk",
                 "/flush_cache", "/reset_prefix_cache")  # POSTs sent on to every server
# (weight reloads and cache resets of prime-rl's, SGLang's and vLLM's servers)
MAX_BODY_BYTES = 64 << 20  # a request body larger than this is refused (413)
MAX_JSON_DEPTH = 100  # JSON nested deeper than this is refused (400)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Settings of the routing proxy."""

    endpoints: tuple[str, ...] = ()  # the servers' base URLs (empty: they register, see
    # ``num_workers``)
    backend: Backend = Backend.VLLM  # what the servers speak: vLLM's OpenAI API or SGLang's
    model: str | None = None  # the served model name (None: ask the servers)
    num_workers: int | None = None  # without endpoints: wait for this many servers to
    # register (POST /workers, as slime's engines do with the SGLang Model Gateway)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    session_headers: tuple[str, ...] = SESSION_HEADERS  # first one present names the session
    group_headers: tuple[str, ...] = GROUP_HEADERS
    fan_out_paths: tuple[str, ...] = FAN_OUT_PATHS
    session_ttl_s: float = DEFAULT_TTL_S  # a session key idle this long is forgotten
    gate_window_turns: int = 256  # turns per window of the balance gate (``PaceWindows``)
    tokenize_timeout_s: float = 60.0  # a /tokenize call to a server
    text_prompts: bool = True  # a plain-text completions prompt goes to its server as text
    # (tokenized there, its ids echoed), not first to /tokenize: one round trip less
    ready_timeout_s: float = 600.0  # a request waits this long for the servers to register
    admin_token: str | None = field(default=None, repr=False)  # admin calls on the data
    # listener need it (``Authorization: Bearer``); None: they go to the admin listener only
    max_body_bytes: int = MAX_BODY_BYTES
    max_json_depth: int = MAX_JSON_DEPTH
    read_timeout_s: float = 60.0  # a request's headers, then its body, must arrive within it
    max_concurrency: int | None = None  # generation requests in flight (None: no limit);
    # beyond it a request is refused with 429

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", Backend(self.backend))
        object.__setattr__(self, "endpoints", tuple(e.rstrip("/") for e in self.endpoints))
        if self.backend is Backend.VLLM_CHAT:
            raise ConfigError("the servers' backend is 'vllm' or 'sglang' (chat requests go to "
                              "them as token ids on /v1/completions)")
        if not self.endpoints and not self.num_workers:
            raise ConfigError("give the servers' endpoints, or num_workers to wait for them to "
                              "register (POST /workers)")
        if self.num_workers is not None and self.num_workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got {self.num_workers}")
        if self.endpoints and self.num_workers not in (None, len(self.endpoints)):
            raise ConfigError(f"num_workers={self.num_workers} but {len(self.endpoints)} "
                              "endpoints given")
        if len(set(self.endpoints)) != len(self.endpoints):
            raise ConfigError("an endpoint is listed twice")
        for e in self.endpoints:
            if not e.startswith(("http://", "https://")):
                raise ConfigError(f"endpoint {e!r} must be an http(s):// URL")
        for p in self.fan_out_paths:
            if not p.startswith("/") or p in RESERVED_PATHS:
                raise ConfigError(f"fan-out path {p!r} must start with / and not be one of the "
                                  "proxy's own routes")
        if self.gateway.stream and self.backend is Backend.SGLANG:
            raise ConfigError("gateway.stream streams vLLM's pieces; SGLang's are interrupted "
                              "by /abort_request without it")
        if self.gate_window_turns < 1:
            raise ConfigError(f"gate_window_turns must be >= 1, got {self.gate_window_turns}")
        if self.admin_token is not None and (not self.admin_token.strip()
                                             or self.admin_token != self.admin_token.strip()):
            raise ConfigError("the admin token must be non-empty, without surrounding spaces")
        for name in ("max_body_bytes", "max_json_depth", "max_concurrency"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("session_ttl_s", "tokenize_timeout_s", "ready_timeout_s",
                     "read_timeout_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {v!r}")

    @property
    def num_servers(self) -> int:
        return len(self.endpoints) or int(self.num_workers or 0)


def header_key(headers: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` present (non-empty) in ``headers`` (case-insensitive)."""
    for name in names:
        v = headers.get(name)
        if v:
            return v
    return None
