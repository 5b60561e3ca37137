"""The ``--ray`` branch of ``tailsieve launch``: place the servers, print the endpoints, then
either exit (``--detach``: the actors are detached; ``launch --stop STATE`` ends them) or serve
until Ctrl-C / SIGTERM and stop everything."""

from __future__ import annotations

import signal
import time
from types import FrameType

import typer

from tailsieve.errors import ConfigError
from tailsieve.runtime.cluster.connect import DEFAULT_CONNECT_TIMEOUT_S
from tailsieve.runtime.cluster.fleet import RayFleet, RayLaunchConfig
from tailsieve.runtime.cluster.spec import EngineGroup
from tailsieve.runtime.launcher import LaunchConfig


def launch_ray(
    launch: LaunchConfig,
    groups: tuple[EngineGroup, ...],
    address: str,
    placement: str,
    gpus_per_replica: int,
    cpus_per_replica: float,
    resource: str | None,
    max_restarts: int,
    emulator_profile: str,
    emulator_args: tuple[str, ...],
    detach: bool,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> None:
    if detach and address == "local":
        raise ConfigError("--detach needs a running Ray cluster (--address auto or host:port)")
    cfg = RayLaunchConfig(
        engines=groups,
        launch=launch,
        address=address,
        placement=placement,
        gpus_per_replica=gpus_per_replica,
        cpus_per_replica=cpus_per_replica,
        resource=resource,
        max_restarts=max_restarts,
        emulator_profile=emulator_profile,
        emulator_args=emulator_args,
        connect_timeout_s=connect_timeout_s,
    )
    fleet = RayFleet(cfg)

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        state = fleet.start()
        nodes = sorted({r["node_id"][:8] for r in state["replicas"]})
        typer.echo(",".join(fleet.endpoints))
        typer.echo(f"state file: {launch.state_path} (nodes {' '.join(nodes)})", err=True)
        if detach:
            fleet.ray.shutdown()
            return
        typer.echo("serving; Ctrl-C stops all replicas", err=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not detach:
            fleet.stop()
