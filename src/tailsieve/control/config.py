"""Controller settings, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailsieve.control.balance_gate import GateConfig
from tailsieve.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Settings of the hierarchical (q, m) controller (docs/design.md, "Controller")."""

    num_groups: int  # N: groups per delivered batch
    num_replicas: int  # R
    group_size: int = 8  # n responses per group
    q0: int | None = None  # initial tail groups; None = 1 (0 when N = 1)
    m0: int | None = None  # initial tail replicas; None = 0 with spread (balance), else 1
    q_min: int = 1  # smallest q once a tail pool exists
    q_max: int | None = None  # largest q; None = N // 2
    momentum: float = 0.5  # damping of the inner-loop momentum (0 = no memory)
    max_q_step: int | None = None  # largest change of q per decision; None = max(1, N // 8)
    q_gain_threshold: float = 0.01  # apply a q change only above this predicted relative gain
    hold_after_increase: int = 1  # steps without a q decision after an increase
    hold_after_decrease: int = 2  # ... after a decrease
    inner_enabled: bool = True  # inner loop (q) on
    inner_target: str = "model"  # "model": balance predicted pool times; "rates": paper's q*
    outer_enabled: bool = True  # outer loop (m) on; False holds m at m0
    m_radius: int = 2  # outer loop looks at splits within this radius
    m_gain_threshold: float = 0.02  # move a replica only above this predicted relative gain
    m_hold_steps: int = 2  # steps without an m decision after a move
    m_confirmations: int = 2  # consecutive outer decisions wanting the same move before it is made
    outer_q_tolerance: float = 0.25  # other splits' balanced q found to within this fraction
    # (the inner loop refines q after a move; a coarse search keeps decisions fast)
    allow_uniform: bool = True  # the outer loop may return to m = 0 (uniform routing)
    history_steps: int = 4  # response-work history used by the model (at most ~2,048 responses)
    max_groups_per_tail_replica: int = 8  # search bound of the model's balanced q (q <= 8 m)
    min_groups_per_tail_replica: int = 2  # q >= this * m: no tail replica left (nearly) idle
    correction_smoothing: float = 0.5  # EMA weight of new observed/predicted ratios
    settle_tolerance: float = 0.2  # inner loop settled when |q* - q| <= max(1, tol * q)
    spread: bool = True  # deal single responses round-robin over a pool's replicas (a group's
    # responses on several replicas); False keeps every group on one replica (the paper)
    balance: bool = False  # move running responses between replicas while a step runs
    # (core.balancer); the re-balance interval and the gain a move needs come from measurements
    seam_s: float = 0.05  # cost of one move beyond its prefill: round trip + one scheduling
    # iteration, seconds (a default estimate until measured on the real engine)
    checks_per_step: int = 32  # timed re-balance checks per expected step (plus checks at
    # completions, at most two per interval): the interval scales with the measured step time
    drain_lpt: bool = True  # LPT moves in a balanced step's drain, by expected remaining
    # tokens from the remembered steps' lengths (core.drain)
    drain_priority: bool = False  # engine priority by tokens generated (core.drain; needs
    # vLLM's --scheduling-policy priority)
    drain_start_fraction: float = 0.25  # the drain begins once this share of responses runs
    gate: GateConfig | None = field(default_factory=GateConfig)  # balance an m = 0 step only
    # while balanced steps are measured faster than round-robin ones (control.balance_gate);
    # None: always balance

    def __post_init__(self) -> None:
        n, r = self.num_groups, self.num_replicas
        if n < 1:
            raise ConfigError(f"num_groups must be >= 1, got {n}")
        if r < 1:
            raise ConfigError(f"num_replicas must be >= 1, got {r}")
        if self.group_size < 1:
            raise ConfigError(f"group_size must be >= 1, got {self.group_size}")
        if not (0 <= self.q_min <= self.q_cap):
            raise ConfigError(
                f"need 0 <= q_min <= q_max, got q_min={self.q_min}, q_max={self.q_cap}"
            )
        if self.q0 is not None and not (0 <= self.q0 <= max(n - 1, 0)):
            raise ConfigError(f"q0 must be in [0, N-1] = [0, {n - 1}], got {self.q0}")
        if not (0 <= self.m_start <= max(r - 1, 0)):
            raise ConfigError(f"m0 must be in [0, R-1] = [0, {r - 1}], got {self.m_start}")
        if not (0.0 <= self.momentum < 1.0):
            raise ConfigError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.q_step_cap < 1:
            raise ConfigError(f"max_q_step must be >= 1, got {self.max_q_step}")
        for name in (
            "q_gain_threshold",
            "m_gain_threshold",
            "settle_tolerance",
            "outer_q_tolerance",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")
        for name in ("hold_after_increase", "hold_after_decrease", "m_hold_steps"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")
        if self.inner_target not in ("model", "rates"):
            raise ConfigError(f"inner_target must be 'model' or 'rates', got {self.inner_target!r}")
        if self.m_radius < 1:
            raise ConfigError(f"m_radius must be >= 1, got {self.m_radius}")
        if self.m_confirmations < 1:
            raise ConfigError(f"m_confirmations must be >= 1, got {self.m_confirmations}")
        if not (1 <= self.min_groups_per_tail_replica <= self.max_groups_per_tail_replica):
            raise ConfigError(
                "need 1 <= min_groups_per_tail_replica <= max_groups_per_tail_replica"
            )
        if not 0.0 <= self.drain_start_fraction <= 1.0:
            raise ConfigError("drain_start_fraction must be in [0, 1]")
        if self.seam_s < 0 or self.checks_per_step < 1:
            raise ConfigError("need seam_s >= 0 and checks_per_step >= 1")
        if self.history_steps < 1:
            raise ConfigError(f"history_steps must be >= 1, got {self.history_steps}")
        if not (0.0 < self.correction_smoothing <= 1.0):
            raise ConfigError("correction_smoothing must be in (0, 1]")

    @property
    def q_cap(self) -> int:
        return self.q_max if self.q_max is not None else max(1, self.num_groups // 2)

    def q_floor(self, m: int) -> int:
        """Smallest q at split ``m`` (0 when there is no tail pool)."""
        if m <= 0:
            return 0
        return min(max(self.q_min, 1, self.min_groups_per_tail_replica * m), self.num_groups - 1)

    @property
    def q_step_cap(self) -> int:
        return self.max_q_step if self.max_q_step is not None else max(1, self.num_groups // 8)

    @property
    def q_start(self) -> int:
        """Initial tail groups: ``q0``, or by default 1 (0 when N = 1 leaves no room)."""
        return self.q0 if self.q0 is not None else min(1, self.num_groups - 1)

    @property
    def m_start(self) -> int:
        """Initial tail replicas: ``m0``, or by default 0 with ``spread`` (start in balance
        mode; the outer loop opens a tail pool when the prediction says it pays) and 1
        without (isolate from the first step, as the paper)."""
        if self.m0 is not None:
            return self.m0
        return 1 if self.num_replicas >= 2 and not self.spread else 0
