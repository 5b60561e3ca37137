"""The rollout's share of a verl training step and the step's speedup: from the router's own
turns (``steps.StepRecord.timing``) and from verl's logged timings (the trainer)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import tracking

from tailsieve.core.training_step import step_speedup
from tailsieve.errors import ConfigError
from tailsieve.integrations.verl.steps import (
    StepRecord,
    StepTiming,
    gate_speedup,
    verl_step_share,
)
from tailsieve.integrations.verl.trainer import TailSieveRayPPOTrainer, with_step_share


def test_step_record_times_the_rollout_against_the_gap() -> None:
    rec = StepRecord()
    rec.turn_started("a", 0.0)
    rec.turn_started("b", 1.0)
    rec.turn_ended("a", 5, 6.0)
    rec.turn_ended("b", 5, 10.0)
    assert rec.timing() is None  # the next step has not started: no gap yet
    rec.turn_started("c", 40.0)  # verl trained for 30 s
    t = rec.timing(rollout_speedup=1.2)
    assert t is not None and (t.rollout_s, t.step_s) == (10.0, 40.0)
    assert t.rollout_share == pytest.approx(0.25)
    assert t.step_speedup == pytest.approx(step_speedup(1.2, 0.25))
    assert "rollout 10.0 s of a 40.0 s training step (rollout share 0.25)" in t.words()
    assert "the training step 1.043x" in t.words()
    assert rec.timing().rollout_speedup is None  # type: ignore[union-attr]


def test_no_gap_no_timing_and_failed_turns_do_not_run() -> None:
    rec = StepRecord()
    rec.turn_started("a", 0.0)
    rec.turn_started("b", 5.0)  # started before the last turn ended: no gap
    rec.turn_ended("a", 5, 8.0)
    rec.turn_ended("b", 5, 9.0)
    assert rec.timing() is None
    rec.turn_started("c", 12.0)
    rec.turn_failed()  # c raised: nothing runs
    rec.turn_started("d", 20.0)
    t = rec.timing()
    assert t is not None and t.step_s == 20.0  # from the step's start to d's start


def test_timing_is_validated() -> None:
    with pytest.raises(ConfigError, match="rollout_s <= step_s"):
        StepTiming(10.0, 5.0, 1.0)
    with pytest.raises(ConfigError, match="rollout_share"):
        StepTiming(1.0, 2.0, 1.5)


def test_gate_speedup() -> None:
    assert gate_speedup([], [1.0]) is None and gate_speedup([1.0], []) is None
    assert gate_speedup([1.0, 1.2], [1.32]) == pytest.approx(1.2)


def test_verl_step_share_from_a_fake_metrics_dict() -> None:
    m = {"timing_s/gen": 30.0, "timing_s/step": 40.0, "actor/loss": 0.1}
    assert verl_step_share(m) == pytest.approx(
        {"tailsieve/rollout_share": 0.75, "tailsieve/step_speedup_ceiling": 4.0})
    assert verl_step_share({"timing_s/gen": 5.0, "timing_s/step": 5.0}) == {
        "tailsieve/rollout_share": 1.0}
    for bad in ({}, {"timing_s/gen": 3.0}, {"timing_s/gen": 50.0, "timing_s/step": 40.0},
                {"timing_s/gen": "x", "timing_s/step": 40.0}):
        assert verl_step_share(bad) == {}


def test_fit_logs_the_share_through_verl_s_tracking(monkeypatch: pytest.MonkeyPatch) -> None:
    """While ``fit`` runs, the ``Tracking`` verl's fit builds adds TailSieve's share to each
    step's metrics; afterwards verl's class is back."""
    logged: list[dict[str, Any]] = []
    original = tracking.Tracking
    monkeypatch.setattr(original, "log",
                        lambda self, data, step, backend=None: logged.append(dict(data)))

    def fake_fit(self: Any) -> str:
        from verl.utils.tracking import Tracking  # as verl's fit imports it

        tr = Tracking.__new__(Tracking)
        tr.log(data={"timing_s/gen": 6.0, "timing_s/step": 8.0}, step=1)
        tr.log(data={"val/score": 1.0}, step=1)
        return "done"

    monkeypatch.setattr(RayPPOTrainer, "fit", fake_fit)
    trainer = TailSieveRayPPOTrainer.__new__(TailSieveRayPPOTrainer)
    assert trainer.fit() == "done"
    assert tracking.Tracking is original
    assert logged[0]["tailsieve/rollout_share"] == pytest.approx(0.75)
    assert logged[0]["tailsieve/step_speedup_ceiling"] == pytest.approx(4.0)
    assert logged[1] == {"val/score": 1.0}
    assert issubclass(with_step_share(original), original)
