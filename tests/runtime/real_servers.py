"""The real-model vLLM servers of the tests (SmolLM2-135M-Instruct, ``scripts/setup_real_model.sh``
converts it, ``scripts/start_real_servers.sh`` serves it; ``scripts/test.sh`` does both).

``TAILSIEVE_REAL_ENDPOINTS``: comma-separated URLs; ``TAILSIEVE_REAL_MODEL``: the served name
(default ``smollm2``); ``TAILSIEVE_REAL_MODEL_DIR``: the checkpoint. When the set-up could not
have the model it wrote the reason next to the checkpoint (``<dir>.unavailable``): the tests
that need it skip with that reason, and with ``CI=true`` fail with it (``tests/conftest.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL_ENDPOINTS = [u for u in os.environ.get("TAILSIEVE_REAL_ENDPOINTS", "").split(",") if u]
REAL_MODEL = os.environ.get("TAILSIEVE_REAL_MODEL", "smollm2")
REAL_MODEL_DIR = Path(os.environ.get("TAILSIEVE_REAL_MODEL_DIR",
                                     ROOT / ".cache" / "smollm2-135m-instruct"))


def skip_reason(num_servers: int = 2) -> str | None:
    """Why the real-model tests cannot run here, or None."""
    why = REAL_MODEL_DIR.with_name(REAL_MODEL_DIR.name + ".unavailable")
    if why.is_file():
        return f"real model unavailable: {why.read_text().strip()}"
    if len(REAL_ENDPOINTS) < num_servers:
        return (f"TAILSIEVE_REAL_ENDPOINTS not set ({num_servers} real-model vLLM servers; "
                "scripts/test.sh starts them with scripts/start_real_servers.sh)")
    return None


def needs_real(num_servers: int = 2) -> pytest.MarkDecorator:
    why = skip_reason(num_servers)
    return pytest.mark.skipif(why is not None, reason=why or "")
