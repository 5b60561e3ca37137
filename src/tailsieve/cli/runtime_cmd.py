"""Sub-commands of this module are registered by ``register``."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (none yet)."""
