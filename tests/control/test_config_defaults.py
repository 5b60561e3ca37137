"""Defaults never make a valid setting fail: every policy builds with N = 1 and R = 1."""

from __future__ import annotations

import pytest

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import ControllerName, make_controller
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile


@pytest.mark.parametrize("name", [c.value for c in ControllerName if c.value != "tailsieve-static"])
@pytest.mark.parametrize("num_groups", [1, 2, 64])
@pytest.mark.parametrize("num_replicas", [1, 2, 8])
def test_every_policy_builds_with_its_defaults(name: str, num_groups: int, num_replicas: int) -> None:
    cfg = ControllerConfig(num_groups=num_groups, num_replicas=num_replicas)
    assert cfg.q_start == (0 if num_groups == 1 else 1)
    make_controller(name, cfg, load_profile("cpu"))


def test_explicit_q0_out_of_range_is_still_an_error() -> None:
    with pytest.raises(ConfigError, match="q0 must be in"):
        ControllerConfig(num_groups=1, num_replicas=2, q0=1)
    assert ControllerConfig(num_groups=4, num_replicas=2, q0=3).q_start == 3
