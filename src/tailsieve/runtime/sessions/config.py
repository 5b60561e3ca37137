"""``GatewayConfig``: how the session gateway places turns, cuts them into pieces and moves them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tailsieve.core.balancer import BalanceSettings
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import parse_profile
from tailsieve.runtime.execution.moves import MoveSettings
from tailsieve.runtime.execution.stall_watch import StallSettings
from tailsieve.runtime.sessions.admit import check_mode
from tailsieve.session.midturn import AGENTIC_BALANCE
from tailsieve.session.routers import SessionPolicy, parse_policy
from tailsieve.session.settings import SessionSettings

AUTO_FALLBACK_PROFILE = "cpu"  # the cost model ``profile="auto"`` uses until it has fitted one


def default_balance() -> BalanceSettings:
    """The agentic simulator's mid-turn checks (``session.midturn.AGENTIC_BALANCE``: every
    5 s, priced over a 30 s horizon without a step-time estimate, 50 ms seams)."""
    return AGENTIC_BALANCE


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Settings of a ``SessionGateway``.

    Moves are on by default: turn-boundary moves by the policy's router (TailSieve's prices
    each against the re-prefill it costs), and, with the ``tailsieve`` policy, mid-turn moves
    of running turns at piece ends (``core.balancer``), which the balance gate turns off where
    they are measured not to pay. ``moves=False`` keeps every later turn on the replica of its
    previous turn (while that one is healthy) and runs each turn as one piece.
    """

    policy: SessionPolicy = SessionPolicy.TAILSIEVE  # or its value, e.g. "verl-sticky"
    moves: bool = True  # TailSieve's moves (boundary and mid-turn); see the class docstring
    piece_tokens: int | None = None  # max tokens per piece while mid-turn moves run (None:
    # moves.PIECE_TOKENS, or one piece where the runner interrupts pieces; with the auto
    # profile, only where a move may pay: ``MidTurnMoves.pieces_pay``); a turn without
    # mid-turn moves runs as one piece
    stream: bool = False  # ``over_http`` on vLLM: stream each piece, so that a mid-turn move
    # interrupts it at once, keeping what it streamed (SGLang interrupts by /abort_request)
    stream_interval: int | None = None  # streamed vLLM pieces: tokens per chunk (None: 1)
    continuation: bool = True  # a turn hit by a replica fault continues elsewhere from its
    # last seam (False: it starts again from its prompt)
    settings: SessionSettings | None = None  # the session router's (None: its defaults)
    balance: BalanceSettings = field(default_factory=default_balance)  # mid-turn checks
    # (their ``expected_step_s`` is replaced by the last step's time, step by step)
    gate: bool = True  # the balance gate may turn mid-turn moves off (fed per step)
    profile: str = "auto"  # cost model: a profile name, a profile JSON path, or "auto"
    fallback_profile: str = AUTO_FALLBACK_PROFILE  # what "auto" uses until it has fitted one
    request_timeout_s: float | None = 3600.0  # HttpPieceRunner: a piece running longer = fault
    no_replica_timeout_s: float = 60.0  # how long a turn waits for a healthy replica, s
    probe_interval_s: float = 1.0  # a replica taken out is probed this often, s
    stall: StallSettings = field(default_factory=StallSettings)  # when a replica is hung
    # (a running piece without progress for longer than the cost model expects)
    max_empty_aborts: int = 3  # pieces in a row aborted by the server with nothing kept, no
    # move asked, before the turn fails
    router_kw: dict[str, Any] = field(default_factory=dict)  # passed to make_router
    kv_admission: str = "auto"  # admit new sessions by KV room (``runtime.sessions.admit``):
    # "auto" where ``session.admission.kv_bound`` says the last step was KV-bound (the
    # ``tailsieve`` policy), "on" always, "off" never
    kv_metrics_interval_s: float | None = 0.5  # while admission may be on, read each engine's
    # KV (``/metrics``: its size, the KV in use, preemptions; ``runtime.engine.engine_kv``) this
    # often, real seconds; None: never (the book's model of the KV alone)
    move: MoveSettings = field(init=False, repr=False, compare=False)  # the move settings
    # above, in the one form every front door shares (``runtime.execution.moves``)

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", parse_policy(self.policy))
        object.__setattr__(self, "move", MoveSettings(self.moves, self.policy.value,
                                                      self.piece_tokens, self.gate, self.stall))
        if self.request_timeout_s is not None and not self.request_timeout_s > 0:
            raise ConfigError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        for name in ("no_replica_timeout_s", "probe_interval_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {v!r}")
        check_mode(self.kv_admission)
        v = self.kv_metrics_interval_s
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ConfigError(f"kv_metrics_interval_s must be a finite number > 0 or None, "
                              f"got {v!r}")
        if self.max_empty_aborts < 1:
            raise ConfigError(f"max_empty_aborts must be >= 1, got {self.max_empty_aborts}")
        if not self.profile or not self.fallback_profile:
            raise ConfigError("profile and fallback_profile must be non-empty")
        if self.stream_interval is not None and (not self.stream or self.stream_interval < 1):
            raise ConfigError(f"stream_interval ({self.stream_interval}) needs stream=True "
                              "and must be >= 1")

    @property
    def moves_off_reason(self) -> str | None:
        """Why running turns never move under this configuration (None: they may; the gate
        and the sampling of each turn decide further)."""
        return self.move.off_reason

    @property
    def fits_profile(self) -> bool:
        """Whether ``profile`` is ``auto`` or ``auto:NAME`` (fitted online)."""
        return parse_profile(self.profile)[0]

    @property
    def unfitted_profile(self) -> str:
        """The profile that prices until a fit is trusted: ``profile`` when fixed, ``NAME``
        for ``auto:NAME``, ``fallback_profile`` for a bare ``auto``."""
        auto, name = parse_profile(self.profile)
        return (name or self.fallback_profile) if auto else self.profile
