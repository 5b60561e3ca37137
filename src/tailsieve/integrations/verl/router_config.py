"""The options of verl's router plug-in, read from the YAML that ``router_config_path`` names.

::

    router_class: tailsieve.integrations.verl.router.TailSieveRouter
    policy: tailsieve            # any SessionPolicy but the simulator's length-informed
    moves: true                  # boundary and mid-turn moves (behind the cost model)
    piece_tokens: null           # tokens per piece while mid-turn moves run (null: 512)
    profile: auto                # cost model: auto | a profile name | a profile JSON path
    session: {}                  # SessionSettings overrides (move_margin, seam_s, ...)
    balance: {}                  # mid-turn checks: interval_s, horizon_s, seam_s
    policy_options: {}           # make_router keywords (margin, thresholds)
    session_idle_s: 300          # a trajectory silent this long has ended (its sticky state goes)
    max_sessions: 10000          # sticky sessions kept (least recently used go first)
    max_servers: null            # server slots (null: 2 x the first pool, at least 64)
    eos_token_ids: null          # the model's stop ids (null: read from model_path or the server)
    model_path: null             # where to read them (null: the vLLM server's /v1/models root)
    response_length: null        # SGLang only: rollout.response_length (vLLM servers report it)
    prompt_length: null          # SGLang only: rollout.prompt_length
    request_timeout_s: 3600      # a piece running longer counts as a replica fault
    stall: {}                    # hung servers: factor, floor_s, check_interval_s, enabled
    shards: 1                    # router actors that run turns (> 1: by a hash of the trajectory)

verl passes the whole file as a dict (``router_class`` included); any other key is an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from tailsieve.core.balancer import BalanceSettings
from tailsieve.errors import ConfigError
from tailsieve.integrations.settings_values import flag, optional
from tailsieve.runtime.execution.stall_watch import StallSettings
from tailsieve.runtime.sessions import GatewayConfig
from tailsieve.runtime.sessions.config import default_balance
from tailsieve.session import SessionPolicy, SessionSettings, parse_policy

ROUTER_CLASS = "tailsieve.integrations.verl.router.TailSieveRouter"
MIN_SLOTS = 64  # server slots at least (fully-async and separate-async add servers later)


@dataclass(frozen=True, slots=True)
class VerlRouterConfig:
    """The router plug-in's options (see the module docstring)."""

    policy: SessionPolicy = SessionPolicy.TAILSIEVE
    moves: bool = True
    piece_tokens: int | None = None  # None: the gateway's default (512)
    profile: str = "auto"
    session: SessionSettings = field(default_factory=SessionSettings)
    balance: BalanceSettings = field(default_factory=default_balance)
    policy_options: dict[str, Any] = field(default_factory=dict)
    session_idle_s: float = 300.0  # seconds without a turn after which a session has ended
    max_sessions: int = 10000  # sticky sessions kept, least recently used dropped first
    max_servers: int | None = None  # server slots (None: from the first pool)
    eos_token_ids: tuple[int, ...] | None = None  # None: discover (model_path, /v1/models)
    model_path: str | None = None
    response_length: int | None = None  # for servers that do not report their config
    prompt_length: int | None = None
    request_timeout_s: float = 3600.0
    stall: StallSettings = field(default_factory=StallSettings)  # when a server is hung
    shards: int = 1  # router actors running turns; > 1: each trajectory to one by its id's hash

    def __post_init__(self) -> None:
        if self.policy is SessionPolicy.ORACLE:
            raise ConfigError("policy 'length-informed' (formerly 'oracle') knows future "
                              "lengths: simulator only")
        if self.piece_tokens is not None and self.piece_tokens < 1:
            raise ConfigError(f"piece_tokens must be >= 1, got {self.piece_tokens}")
        if not (math.isfinite(self.session_idle_s) and self.session_idle_s > 0):
            raise ConfigError(f"session_idle_s must be > 0, got {self.session_idle_s}")
        if self.max_sessions < 1:
            raise ConfigError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if self.max_servers is not None and self.max_servers < 1:
            raise ConfigError(f"max_servers must be >= 1, got {self.max_servers}")
        for name in ("response_length", "prompt_length"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"{name} must be >= 1, got {v}")
        if self.shards < 1:
            raise ConfigError(f"shards must be >= 1, got {self.shards}")
        if not self.request_timeout_s > 0:
            raise ConfigError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if not self.profile:
            raise ConfigError("profile must be non-empty")

    @classmethod
    def from_yaml(cls, raw: Mapping[str, Any] | None) -> VerlRouterConfig:
        """From the dict verl loads from ``router_config_path`` (one error per bad key)."""
        d = dict(raw or {})
        d.pop("router_class", None)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"router YAML: unknown key(s) {', '.join(unknown)}; known: "
                              f"router_class, {', '.join(sorted(known))}")
        kw: dict[str, Any] = {}
        if "policy" in d:
            kw["policy"] = parse_policy(str(d["policy"]))
        if "moves" in d:
            kw["moves"] = flag(d["moves"], "moves")
        for name in ("piece_tokens", "max_servers", "response_length", "prompt_length"):
            if name in d:
                kw[name] = optional(d[name], int, name)
        for name in ("session_idle_s", "request_timeout_s"):
            if name in d:
                kw[name] = _number(d[name], name)
        if "shards" in d:
            kw["shards"] = int(_number(d["shards"], "shards"))
        if "max_sessions" in d:
            kw["max_sessions"] = int(_number(d["max_sessions"], "max_sessions"))
        if "profile" in d:
            kw["profile"] = str(d["profile"])
        if "model_path" in d:
            kw["model_path"] = optional(d["model_path"], str, "model_path")
        if d.get("eos_token_ids") is not None:
            kw["eos_token_ids"] = _ids(d["eos_token_ids"])
        kw["session"] = _section(SessionSettings, d.get("session"), "session")
        kw["balance"] = _section(BalanceSettings, d.get("balance"), "balance",
                                 default_balance())
        kw["stall"] = _section(StallSettings, d.get("stall"), "stall")
        if d.get("policy_options") is not None:
            if not isinstance(d["policy_options"], Mapping):
                raise ConfigError("policy_options must be a mapping")
            kw["policy_options"] = dict(d["policy_options"])
        return cls(**kw)

    def gateway_config(self, stop_ids_known: bool = True) -> tuple[GatewayConfig, str | None]:
        """The session gateway's configuration, and why it runs without moves when the
        servers cannot be pieced: vLLM reports a stop and a cut alike, so without the model's
        stop ids turns run whole and sticky."""
        why = None
        moves = self.moves
        if not stop_ids_known and moves:
            why = ("the model's stop ids are unknown (vLLM reports a stop and a cut alike): "
                   "set eos_token_ids or model_path in the router YAML; turns run whole, "
                   "sticky")
            moves = False
        return GatewayConfig(
            policy=self.policy,
            moves=moves,
            piece_tokens=self.piece_tokens,
            settings=self.session,
            balance=self.balance,
            profile=self.profile,
            request_timeout_s=self.request_timeout_s,
            stall=self.stall,
            router_kw=dict(self.policy_options),
        ), why

    def num_slots(self, num_servers: int) -> int:
        """Server slots to reserve for a first pool of ``num_servers``."""
        if self.max_servers is not None:
            if num_servers > self.max_servers:
                raise ConfigError(f"{num_servers} servers but max_servers={self.max_servers}")
            return self.max_servers
        return max(MIN_SLOTS, 2 * num_servers)


def _number(value: Any, key: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number, got {value!r}") from None


def _ids(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list | tuple) else [value]
    try:
        return tuple(int(v) for v in items)
    except (TypeError, ValueError):
        raise ConfigError(f"eos_token_ids must be a list of token ids, got {value!r}") from None


def _section(kind: Any, raw: Any, key: str, base: Any = None) -> Any:
    """A dataclass ``kind`` from the YAML mapping ``raw`` (over ``base``, else its defaults);
    an unknown key is an error naming it."""
    if raw is None:
        return base if base is not None else kind()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{key} must be a mapping, got {raw!r}")
    names = {f.name for f in fields(kind)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ConfigError(f"{key}: unknown key(s) {', '.join(unknown)}; known: "
                          f"{', '.join(sorted(names))}")
    if base is None:
        return kind(**dict(raw))
    return replace(base, **dict(raw))
