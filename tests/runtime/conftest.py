"""The runtime's tests share ``tests/runtime``'s helpers (``real_servers``, ``engine_outputs``,
``vllm_wire``, ``test_live_emulator``) from every room below it (``engine``, ``execution``,
``step``, ``sessions``, ``proxy``), whichever file is collected first."""

from __future__ import annotations

import sys
from pathlib import Path

RUNTIME_TESTS = str(Path(__file__).resolve().parent)
if RUNTIME_TESTS not in sys.path:
    sys.path.insert(0, RUNTIME_TESTS)
