"""Builders shared by the session tests: grounded replica configs and views."""

from __future__ import annotations

from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.replica_view import ReplicaView


def grounded_config(name: str = "qwen3-4b-h100") -> ReplicaConfig:
    """A grounded replica whose first prefills cost the profile's prefill model."""
    return ReplicaConfig.from_profile(builtin_profile(name), prefill_s_per_token="profile")


def view(config: ReplicaConfig, r: int, running: int = 0, ctx_per: float = 4000.0,
         tool: int = 0, tool_ctx_per: float = 4000.0, healthy: bool = True,
         waiting: int = 0) -> ReplicaView:
    """Replica ``r`` with ``running`` turns of ``ctx_per`` tokens and ``tool`` sessions in a
    tool call."""
    return ReplicaView(r, config, running, running * ctx_per, waiting, tool, tool * tool_ctx_per,
                       healthy=healthy)
