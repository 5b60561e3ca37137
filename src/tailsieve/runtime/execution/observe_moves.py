"""The one definition of the "are moves on, and why not" metrics, for every entry point.

``tailsieve_moves_active`` is 1 while running responses may move between replicas;
``tailsieve_moves_off{reason="..."}`` is 1 for the reason they do not (no sample when they
do). The live runtime, the verl and slime adapters and the proxy expose the same two names.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

MOVES_ACTIVE = "tailsieve_moves_active"
MOVES_OFF = "tailsieve_moves_off"
MOVES_ACTIVE_HELP = "1 when running responses may move between replicas"
MOVES_OFF_HELP = "1 for the reason moves are off (label reason)"


def moves_families(off_reason: str | None) -> list[GaugeMetricFamily]:
    """The two families for a scrape: active, and off with its reason."""
    active = GaugeMetricFamily(MOVES_ACTIVE, MOVES_ACTIVE_HELP, value=0.0 if off_reason else 1.0)
    off = GaugeMetricFamily(MOVES_OFF, MOVES_OFF_HELP, labels=["reason"])
    if off_reason:
        off.add_metric([off_reason], 1.0)
    return [active, off]


class MovesCollector(Collector):
    """The two families for a registry, over ``off_reason`` as last set."""

    off_reason: str | None = None

    def collect(self) -> list[GaugeMetricFamily]:
        return moves_families(self.off_reason)
