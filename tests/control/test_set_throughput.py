"""A controller handed a new throughput model (the live ``auto`` profile refits between steps)
keeps what it measured: corrections and gate ratios are rescaled with the predictions."""

from __future__ import annotations

import pytest

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.control.hierarchical import HierarchicalController
from tailsieve.control.predictor import StepWork
from tailsieve.model.profiles import load_profile

GPU4B = load_profile("qwen3-4b-h100")


def controller_with_history() -> HierarchicalController:
    ctl = make_controller("tailsieve", ControllerConfig(num_groups=4, num_replicas=2), GPU4B)
    assert isinstance(ctl, HierarchicalController)
    work = StepWork([[900, 40, 30, 20], [60, 50, 40, 30], [70, 20, 10, 5], [80, 60, 40, 20]], 0)
    ctl.state.history = [work]
    ctl._samples = ctl.predictor.samples([work])
    ctl.state.k_uniform, ctl.state.k_bulk, ctl.state.k_tail = 0.9, 1.1, 1.2
    ctl.state.gate.balanced[:] = [0.8, 0.85]
    ctl.state.gate.round_robin[:] = [1.0]
    return ctl


def test_corrections_follow_the_prediction() -> None:
    ctl = controller_with_history()
    before = ctl.predict_pool_times(0, 0)
    assert before is not None
    slower = GPU4B.scaled(2.0)
    ctl.set_throughput(slower)
    assert ctl.predictor.tail_model is slower and ctl.predictor.bulk_model is slower
    after = ctl.predict_pool_times(0, 0)
    assert after is not None
    assert after.raw_bulk_s == pytest.approx(2.0 * before.raw_bulk_s, rel=1e-6)
    st = ctl.state
    # observed/predicted halves: the corrected predictions are what they were
    assert st.k_uniform * after.raw_bulk_s == pytest.approx(0.9 * before.raw_bulk_s)
    assert (st.k_bulk, st.k_tail) == pytest.approx((0.55, 0.6))
    assert st.gate.balanced == pytest.approx([0.4, 0.425])
    assert st.gate.round_robin == pytest.approx([0.5])


def test_without_history_only_the_model_changes() -> None:
    ctl = make_controller("tailsieve", ControllerConfig(num_groups=4, num_replicas=2), GPU4B)
    assert isinstance(ctl, HierarchicalController)
    cpu = load_profile("cpu")
    ctl.set_throughput(cpu)
    assert ctl.predictor.tail_model is cpu and ctl.state.k_uniform == 1.0
    uniform = make_controller("uniform", ControllerConfig(num_groups=4, num_replicas=2), GPU4B)
    uniform.set_throughput(cpu)  # no model to change: a no-op
