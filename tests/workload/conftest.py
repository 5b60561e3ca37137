"""Fixtures for workload tests."""

from __future__ import annotations

from pathlib import Path

import pytest

AIME = Path(__file__).resolve().parents[3] / "shared" / "data" / "aime-r1distill-1.5b-lengths.csv"


@pytest.fixture(scope="session")
def aime_path() -> Path:
    """The AIME length CSV in ../shared/data (tests skip if it is absent)."""
    if not AIME.is_file():
        pytest.skip(f"AIME data not found at {AIME}")
    return AIME
