"""How long a session's tool wait counts as load at its home: a horizon fitted from the tool
waits actually seen (pure).

A session whose turn ended waits on a tool at the replica it ran on; its next turn usually
comes back there, so routers count it as load (``ReplicaView.num_tool_waits``). But a client
rarely says that a session ended (verl never does; a proxy key may simply go quiet), and an
ended session counted until an idle timeout of hours pins phantom load on its replica: the
router sees a busy replica that is idle. So a tool wait counts only for a horizon: the
``quantile`` of the recent observed waits (the time from a turn's end to the session's next
turn), with ``prior_weight`` pseudo-observations of ``prior_s`` (the horizon before any wait
is seen, and a brake on the first few), at most ``cap_s``. A session whose wait outlasts the
horizon keeps its home and its cache estimate (its next turn still prefers it); it no longer
counts as load there.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from tailsieve.errors import ConfigError

__all__ = ["ToolWaitHorizon", "ToolWaitSettings"]


@dataclass(frozen=True, slots=True)
class ToolWaitSettings:
    """The tool-wait horizon's fit."""

    quantile: float = 0.95  # of the observed waits: most returning sessions still count
    prior_s: float = 60.0  # horizon before any wait is seen, seconds
    prior_weight: int = 1  # pseudo-observations of ``prior_s`` among the observed waits
    # (with the 0.95 quantile, 20 waits outvote it)
    cap_s: float = 600.0  # the horizon never exceeds this, seconds
    window: int = 256  # recent waits kept

    def __post_init__(self) -> None:
        if not 0.0 < self.quantile <= 1.0:
            raise ConfigError(f"tool-wait quantile must be in (0, 1], got {self.quantile}")
        for name in ("prior_s", "cap_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"tool-wait {name} must be a finite number > 0, got {v!r}")
        if self.prior_weight < 0 or self.window < 1:
            raise ConfigError("tool-wait prior_weight must be >= 0 and window >= 1")


class ToolWaitHorizon:
    """The fitted horizon (see the module docstring); ``observe`` each wait that ended in a
    turn."""

    def __init__(self, settings: ToolWaitSettings | None = None) -> None:
        self.settings = settings or ToolWaitSettings()
        self._waits: deque[float] = deque(maxlen=self.settings.window)
        self._horizon_s: float | None = None  # cached fit (None: refit on read)

    @property
    def num_observations(self) -> int:
        return len(self._waits)

    def observe(self, wait_s: float) -> None:
        """A session came back after waiting ``wait_s`` on a tool."""
        if not math.isfinite(wait_s) or wait_s < 0:
            raise ConfigError(f"a tool wait must be a finite number >= 0, got {wait_s!r}")
        self._waits.append(wait_s)
        self._horizon_s = None

    @property
    def horizon_s(self) -> float:
        """How long a tool wait counts as load at its home, seconds."""
        if self._horizon_s is None:
            cfg = self.settings
            xs = sorted([*self._waits, *([cfg.prior_s] * cfg.prior_weight)])
            q = xs[min(len(xs) - 1, math.ceil(cfg.quantile * len(xs)) - 1)] if xs else (
                cfg.prior_s)
            self._horizon_s = min(q, cfg.cap_s)
        return self._horizon_s
