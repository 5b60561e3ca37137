"""The prompt budget of a run: steps x groups plus the most extra groups a policy launches."""

from __future__ import annotations

import pytest

from tailsieve.control.budget import max_extra_groups, prompts_needed
from tailsieve.control.config import ControllerConfig
from tailsieve.errors import ConfigError
from tailsieve.sim.api import simulate


def test_max_extra_groups_per_policy() -> None:
    cfg = ControllerConfig(num_groups=16, num_replicas=2)
    assert max_extra_groups("uniform", cfg) == 0
    assert max_extra_groups("tailsieve", cfg) == 8  # q_max = N // 2
    assert max_extra_groups("tailsieve-fixed", cfg) == 8
    assert max_extra_groups("tailsieve", ControllerConfig(16, 1)) == 0  # no tail pool
    assert max_extra_groups("tailsieve", ControllerConfig(16, 2, q0=12)) == 12  # q0 > q_max
    assert max_extra_groups("tailsieve", ControllerConfig(8, 8)) == 7  # q >= 2 m, m <= 7: N - 1
    assert max_extra_groups("tailsieve-static", ControllerConfig(16, 4, q0=3, m0=1)) == 3
    assert max_extra_groups("tailsieve-static", ControllerConfig(16, 4, q0=3, m0=0)) == 0
    with pytest.raises(ConfigError, match="needs m0"):
        max_extra_groups("tailsieve-static", cfg)
    with pytest.raises(ConfigError, match="unknown step policy 'nope'"):
        max_extra_groups("nope", cfg)
    b = prompts_needed("tailsieve", cfg, 4)
    assert (b.num_delivered, b.max_extra, b.num_needed) == (64, 8, 72)


@pytest.mark.parametrize(
    ("policy", "replicas", "groups", "q0", "m0", "spread"),
    [
        ("tailsieve", 4, 16, None, None, False),
        ("tailsieve", 3, 8, None, None, True),
        ("tailsieve-fixed", 4, 12, 5, 2, False),
        ("tailsieve-static", 4, 16, 3, 1, False),
        ("uniform", 4, 16, None, None, True),
    ],
)
def test_a_run_never_draws_more_than_its_budget(
    policy: str, replicas: int, groups: int, q0: int | None, m0: int | None, spread: bool
) -> None:
    """Through the simulator: every step aborts (carries) at most ``max_extra`` groups, and the
    steps draw ``steps x N`` prompts plus the last step's extras, within the budget."""
    steps = 8
    res = simulate("paper-math", policies=[policy], replicas=replicas, groups=groups,
                   group_size=4, steps=steps, q0=q0, m0=m0, spread=spread, num_prompts=400)
    cfg = ControllerConfig(groups, replicas, 4, q0=q0, m0=m0, spread=spread)
    budget = prompts_needed(policy, cfg, steps)
    records = [r for r in res.runs[policy].run.records if not r.is_flush]
    assert len(records) == steps
    assert all(len(r.aborted_ids) <= budget.max_extra for r in records)
    carried_any = any(r.aborted_ids for r in records)
    assert carried_any == (policy != "uniform" and not spread)  # the cases exercise extras
    drawn = sum(len(r.drawn_ids) for r in records)
    assert drawn == steps * groups + len(records[-1].aborted_ids)
    assert drawn <= budget.num_needed
