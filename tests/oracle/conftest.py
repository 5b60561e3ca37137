"""Shared fixtures of the oracle tests."""

from __future__ import annotations

import numpy as np
import pytest

from tailsieve.model.profiles import load_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.workload.presets import AIME_TRACE_IN_REPO

AIME_CSV = AIME_TRACE_IN_REPO


@pytest.fixture(scope="session")
def aime_lengths() -> np.ndarray:
    if not AIME_CSV.is_file():
        pytest.skip(f"AIME data not found at {AIME_CSV}")
    return np.loadtxt(AIME_CSV, delimiter=",", skiprows=1, usecols=2)


@pytest.fixture(scope="session", params=["cpu", "illustrative-flat"])
def profile(request: pytest.FixtureRequest) -> ThroughputModel:
    return load_profile(request.param)
