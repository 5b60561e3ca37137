"""``launch --stop`` for a Ray state file: servers, actors, supervisor, placement group."""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.cluster.connect import DEFAULT_CONNECT_TIMEOUT_S, connect_ray
from tailsieve.runtime.cluster.host import healthy, stop_group
from tailsieve.runtime.cluster.preflight import split_host_port, tcp_reachable
from tailsieve.runtime.cluster.state import is_dead


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "launch --ray needs Ray: pip install 'tailsieve[ray]' (or pip install ray)"
        ) from None
    return ray


def stop_ray_state(ray: Any, state: dict[str, Any], timeout_s: float = 60.0) -> list[int]:
    """Stop what a Ray state file names: each server (process group), its actor (no restart),
    the supervisor and the placement group. Returns the server PIDs stopped."""
    info = state["ray"]
    ns = info["namespace"]
    pids: list[int] = []
    with contextlib.suppress(Exception):
        ray.kill(ray.get_actor(info["supervisor"], namespace=ns), no_restart=True)
    for name in info["actors"]:
        try:
            h = ray.get_actor(name, namespace=ns)
        except ValueError:
            continue  # never created or already gone
        with contextlib.suppress(Exception):
            pids.append(int(ray.get(h.stop.remote(), timeout=timeout_s)))
        with contextlib.suppress(Exception):
            ray.kill(h, no_restart=True)
    from ray.util import get_placement_group, remove_placement_group

    with contextlib.suppress(Exception):
        remove_placement_group(get_placement_group(info["placement_group"]))
    return pids + _stop_local_servers(state)


def _stop_local_servers(state: dict[str, Any]) -> list[int]:
    """Stop the state file's servers that run on this machine and still answer (a replica
    marked dead has no server left)."""
    local, pids = _local_addresses(), []
    for row in state.get("replicas", []):
        if is_dead(row) or not row.get("endpoint") or row.get("pid") is None:
            continue
        if row.get("host") in local and healthy(row["endpoint"], 0.5):
            stop_group(int(row["pid"]), 5.0)
            pids.append(int(row["pid"]))
    return pids


def _reachable(address: str, timeout_s: float = 3.0) -> bool:
    """A TCP connection to the Ray GCS ``host:port`` succeeds (True when it names no port)."""
    hp = split_host_port(address)
    return hp is None or tcp_reachable(hp[0], hp[1], timeout_s) is None


def _local_addresses() -> set[str]:
    out = {"127.0.0.1", "localhost"}
    with contextlib.suppress(OSError):
        out.add(socket.gethostbyname(socket.gethostname()))
    return out


def stop_from_ray_state(
    path: str | Path,
    address: str | None = None,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> list[int]:
    """``launch --stop STATE`` for a state file written by ``launch --ray``; the connection to
    the cluster is bounded by ``connect_timeout_s`` (see ``connect_ray``)."""
    p = Path(path)
    state = json.loads(p.read_text())
    addr = address or state["ray"]["address"]
    if not _reachable(addr):  # the cluster is gone, and its actors with it
        pids = _stop_local_servers(state)
        p.unlink(missing_ok=True)
        return pids
    ray = import_ray()
    if not ray.is_initialized():
        connect_ray(
            ray,
            addr,
            connect_timeout_s,
            namespace=state["ray"]["namespace"],
            log_to_driver=False,
        )
    try:
        pids = stop_ray_state(ray, state)
    finally:
        ray.shutdown()
    p.unlink(missing_ok=True)
    return pids
