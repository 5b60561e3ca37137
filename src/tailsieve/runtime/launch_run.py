"""What ``tailsieve launch`` does once its options are read: serve a local fleet until Ctrl-C
(or exit once it is healthy, leaving it up), and stop what a launch state file names.

::

    serve_local(LaunchConfig(model="/models/tiny", replicas=2), detach=True, say=print_line)
    stop_launched(Path(".cache/tailsieve-launch/state.json"))   # the PIDs it stopped
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

from tailsieve.errors import ConfigError
from tailsieve.runtime.launcher import LaunchConfig, VllmFleet, stop_from_state

Say = Callable[[str, bool], None]
"""(line, to stderr) -> None: how a launch tells its user what it did."""


def serve_local(cfg: LaunchConfig, detach: bool, say: Say, serve_s: float = 3600.0) -> list[str]:
    """Start ``cfg``'s servers, wait until healthy and ``say`` their endpoints (stdout) and the
    state file (stderr). ``detach``: return then, leaving them up (``stop_launched`` ends
    them); else serve (sleeping ``serve_s`` at a time) until Ctrl-C, then stop them all.
    Returns the endpoints. A server that fails to come up stops the fleet and raises
    ``ReplicaError``."""
    fleet = VllmFleet(cfg)
    fleet.start_processes()
    try:
        asyncio.run(fleet.wait_healthy())
        say(",".join(fleet.endpoints), False)
        say(f"state file: {cfg.state_path}", True)
        if detach:
            return fleet.endpoints
        say("serving; Ctrl-C stops all replicas", True)
        while True:
            time.sleep(serve_s)
    except KeyboardInterrupt:
        return fleet.endpoints
    finally:
        if not detach:
            fleet.stop()


def stop_launched(state: Path, connect_timeout_s: float = 30.0) -> list[int]:
    """Stop the servers a launch state file names (local processes, or Ray actors); returns
    the PIDs stopped. An unreadable file is a ``ConfigError`` naming it."""
    try:
        data = json.loads(state.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--stop {state}: cannot read the state file ({exc})") from None
    if "ray" in data:
        from tailsieve.runtime.cluster.stop import stop_from_ray_state

        return stop_from_ray_state(state, connect_timeout_s=connect_timeout_s)
    return stop_from_state(state)


__all__ = ["Say", "serve_local", "stop_launched"]
