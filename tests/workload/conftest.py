"""Fixtures for workload tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailsieve.workload.presets import AIME_TRACE_IN_REPO

AIME = AIME_TRACE_IN_REPO


@pytest.fixture(scope="session")
def aime_path() -> Path:
    """The AIME length CSV shipped in the package (workload/data)."""
    if not AIME.is_file():
        pytest.skip(f"AIME data not found at {AIME}")
    return AIME
