"""Controllers by name."""

from __future__ import annotations

import dataclasses
from enum import Enum

from tailsieve.control.config import ControllerConfig
from tailsieve.control.hierarchical import HierarchicalController
from tailsieve.control.static import StaticController
from tailsieve.control.uniform import UniformController
from tailsieve.core.controller import Controller
from tailsieve.errors import ConfigError
from tailsieve.model.throughput import ThroughputModel


class ControllerName(str, Enum):
    UNIFORM = "uniform"
    UNIFORM_REQUESTS = "uniform-requests"
    TAILSIEVE_FIXED = "tailsieve-fixed"
    TAILSIEVE = "tailsieve"
    TAILSIEVE_STATIC = "tailsieve-static"

    @classmethod
    def _missing_(cls, value: object) -> ControllerName:
        names = ", ".join(c.value for c in cls)
        raise ConfigError(f"unknown step policy {value!r}; choose one of {names}")


def make_controller(
    name: str,
    config: ControllerConfig,
    tail_model: ThroughputModel,
    bulk_model: ThroughputModel | None = None,
    moves: bool = True,
) -> Controller:
    """``uniform`` (groups whole, round-robin); ``uniform-requests`` (single responses
    round-robin, as a per-request load balancer); ``tailsieve-fixed`` (inner loop only, split held at ``m0``, default R // 2);
    ``tailsieve`` (inner and outer loop); ``tailsieve-static`` (q and m held at ``q0`` and
    ``m0``, no feedback). ``moves``: ``tailsieve`` moves running responses while a step runs
    (its plans carry ``BalanceSettings``); False gives plans without moves."""
    key = ControllerName(name)
    if key is ControllerName.UNIFORM:
        return UniformController()
    if key is ControllerName.UNIFORM_REQUESTS:
        return UniformController(spread=True)
    if key is ControllerName.TAILSIEVE_STATIC:
        if config.m0 is None:
            raise ConfigError("tailsieve-static needs m0 (and q0): the split it holds")
        return StaticController(config.q_start, config.m0, config.num_groups, config.num_replicas,
                                spread=config.spread)
    if key is ControllerName.TAILSIEVE_FIXED:
        m0 = config.m0 if config.m0 is not None else config.num_replicas // 2
        cfg = dataclasses.replace(config, outer_enabled=False, m0=m0)
        return HierarchicalController(cfg, tail_model, bulk_model, name=key.value)
    return HierarchicalController(dataclasses.replace(config, balance=moves), tail_model,
                                  bulk_model, name=key.value)
