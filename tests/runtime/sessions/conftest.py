"""The session tests share ``tests/runtime``'s helpers (``real_servers``)."""

from __future__ import annotations

import sys
from pathlib import Path

RUNTIME_TESTS = str(Path(__file__).resolve().parents[1])
if RUNTIME_TESTS not in sys.path:
    sys.path.insert(0, RUNTIME_TESTS)
