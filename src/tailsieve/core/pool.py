"""The two logical pools of replicas."""

from __future__ import annotations

from enum import Enum


class Pool(str, Enum):
    """Which pool a group runs in. ``TAIL``: isolated likely-long groups, low concurrency.
    ``BULK``: everything else (and all groups during warm-up and uniform routing)."""

    TAIL = "tail"
    BULK = "bulk"
