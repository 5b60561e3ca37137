"""Fixtures of the session tests."""

from __future__ import annotations

import pytest
from session_helpers import grounded_config

from tailsieve.model.replica_config import ReplicaConfig


@pytest.fixture(scope="session")
def config() -> ReplicaConfig:
    return grounded_config()
