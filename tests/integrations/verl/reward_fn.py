"""A verl custom reward function for the tests: the prompt's number from its own ground truth
(``gt-<i>``), so a row scored with another prompt's ``reward_model`` is caught."""

from __future__ import annotations

from typing import Any


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any
) -> float:
    assert data_source == "tailsieve/test"
    return float(ground_truth.removeprefix("gt-"))
