"""The model's clock of replicas that run at a time scale (emulated replicas replaying a
workload faster than real time, ``EmulatorConfig.time_scale``): a gateway given one prices in
model seconds, as its cost model does, and waits for its checks in the matching real time
(``runtime.execution.check_timer``)."""

from __future__ import annotations

import asyncio

from tailsieve.errors import ConfigError

__all__ = ["ModelClock", "time_scale_of"]


class ModelClock:
    """Model seconds of the running event loop: its time over ``time_scale`` (real seconds
    per model second)."""

    __slots__ = ("time_scale",)

    def __init__(self, time_scale: float) -> None:
        if not time_scale > 0:
            raise ConfigError(f"time_scale must be > 0, got {time_scale}")
        self.time_scale = time_scale

    def __call__(self) -> float:
        return asyncio.get_running_loop().time() / self.time_scale


def time_scale_of(clock: object) -> float:
    """Real seconds per second of ``clock``: a ``ModelClock``'s scale, else 1 (any other
    clock is taken to run in real seconds)."""
    return clock.time_scale if isinstance(clock, ModelClock) else 1.0
