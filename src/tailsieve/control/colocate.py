"""Which replicas speculate, and whether a group's siblings share a server.

Speculation pays where few requests run (``SpecEngine.throughput`` with ``gate = pays``
turns it on only at the batch sizes where the acceptance model and the measured step times
say it pays; at the end of a step that is every replica still decoding stragglers, so the
tail pool is wherever the balancer has gathered them). Only a server's own suffix tree (vLLM
``suffix``, placement ``server`` in ``model.acceptance``) drafts from the siblings that
finished on the same server: dealing groups whole gives ``k = n`` siblings per server instead
of ``k_spread``, at the cost of the balance that spread dealing gives. A group drafter that
sees every sibling wherever it runs (Seer's), a drafter model or prompt lookup gains nothing
from co-location. Nothing here reads a response length.

``choose_colocation`` decides it:

1. the acceptance model first: a source whose drafts do not depend on placement, whose
   acceptance does not grow with ``k``, or a dealing that cannot put more siblings together,
   stays spread;
2. otherwise by measured step times: both dealings ran the warm-up steps (with their own
   acceptance, the moved tokens' lost drafts priced in) and the faster one is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailsieve.errors import ConfigError
from tailsieve.model.acceptance import AcceptanceCurve

Dealing = Literal["spread", "group"]


def k_spread(group_size: int, num_replicas: int) -> int:
    """Siblings per server when a group's responses are dealt one by one round-robin."""
    if group_size < 1 or num_replicas < 1:
        raise ConfigError("group_size and num_replicas must be >= 1")
    return max(1, group_size // num_replicas)


@dataclass(frozen=True, slots=True)
class ColocationChoice:
    """The dealing chosen, the siblings per server it gives and why."""

    dealing: Dealing
    k: int
    reason: str


def draft_gain(curve: AcceptanceCurve, group_size: int, num_replicas: int) -> float:
    """How many times more tokens a verify step accepts with the whole group finished on the
    server than spread (1.0 for a source whose drafts do not depend on placement)."""
    if not curve.server_siblings:
        return 1.0
    return curve.tau(group_size) / curve.tau(k_spread(group_size, num_replicas))


def choose_colocation(
    curve: AcceptanceCurve, group_size: int, num_replicas: int,
    spread_step_s: float, group_step_s: float | None, mode: str = "auto",
    min_gain: float = 1.01,
) -> ColocationChoice:
    """Spread or whole-group dealing. ``spread_step_s`` / ``group_step_s``: measured mean
    step times of the warm-up steps under each dealing (None: the grouped dealing was not
    tried); ``mode``: ``auto``, or ``spread`` / ``group`` to force one."""
    ks = k_spread(group_size, num_replicas)
    if mode not in ("auto", "spread", "group"):
        raise ConfigError(f"colocate must be auto, spread or group, got {mode!r}")
    if mode == "spread":
        return ColocationChoice("spread", ks, "forced")
    gain = draft_gain(curve, group_size, num_replicas)
    if mode == "group":
        return ColocationChoice("group", group_size, "forced")
    if gain < min_gain:
        return ColocationChoice("spread", ks, f"draft gain {gain:.3f} < {min_gain}")
    if group_step_s is None:
        return ColocationChoice("spread", ks, "grouped dealing not measured")
    if group_step_s < spread_step_s:
        return ColocationChoice(
            "group", group_size,
            f"draft gain {gain:.3f}; measured {group_step_s:.2f} s < {spread_step_s:.2f} s")
    return ColocationChoice(
        "spread", ks,
        f"draft gain {gain:.3f}; measured {group_step_s:.2f} s >= {spread_step_s:.2f} s")
