"""Shared fixtures of the oracle tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tailsieve.model.profiles import load_profile
from tailsieve.model.throughput import ThroughputModel

AIME_CSV = (
    Path(__file__).resolve().parents[2]
    / ".."
    / "shared"
    / "data"
    / "aime-r1distill-1.5b-lengths.csv"
)


@pytest.fixture(scope="session")
def aime_lengths() -> np.ndarray:
    if not AIME_CSV.is_file():
        pytest.skip(f"AIME data not found at {AIME_CSV}")
    return np.loadtxt(AIME_CSV, delimiter=",", skiprows=1, usecols=2)


@pytest.fixture(scope="session", params=["cpu", "gpu"])
def profile(request: pytest.FixtureRequest) -> ThroughputModel:
    return load_profile(request.param)
