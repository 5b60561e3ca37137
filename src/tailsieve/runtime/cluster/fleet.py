"""``tailsieve launch --ray``: R replica servers as Ray actors, a state file, and a clean stop.

One placement group (``SPREAD`` across nodes or ``PACK`` onto few) holds one bundle per replica:
``{"GPU": tp}`` on GPU clusters, else ``{"CPU": c}`` plus one unit of a custom resource. Each
bundle gets a ``ServerHost`` actor (``max_restarts``) that starts the server bound to its node's
address. A small supervisor actor, pinned to the launching node, polls the server actors and
rewrites the state file (atomically) whenever an address changes, so ``rollout --state`` follows
a server that Ray restarted at a new address. Actors, placement group and supervisor are named
and detached (unless the Ray instance is local to the launcher), so ``launch --stop STATE``
finds and ends them from another process. Ray is imported lazily (``pip install tailsieve[ray]``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.cluster.connect import (
    DEFAULT_CONNECT_TIMEOUT_S,
    LOOPBACK_HOSTS,
    ClusterSnapshot,
    connect_ray,
)
from tailsieve.runtime.cluster.host import ServerHost
from tailsieve.runtime.cluster.preflight import check_placement, check_reachable, split_host_port
from tailsieve.runtime.cluster.spec import EngineGroup, ServerSpec, build_specs
from tailsieve.runtime.cluster.state import set_replicas, write_json_atomic
from tailsieve.runtime.cluster.stop import import_ray, stop_ray_state
from tailsieve.runtime.cluster.supervisor import Supervisor
from tailsieve.runtime.launcher import LaunchConfig

PLACEMENTS = {"spread": "SPREAD", "pack": "PACK"}


@dataclass(frozen=True, slots=True)
class RayLaunchConfig:
    """How to place the replicas on a Ray cluster."""

    engines: tuple[EngineGroup, ...]  # replica order; the last tail_replicas are the tail pool
    launch: LaunchConfig  # model, served name, speculation per pool, vLLM flags, state file
    address: str = "auto"  # Ray address: auto (RAY_ADDRESS / running cluster), local, or host:port
    placement: str = "spread"  # spread | pack
    gpus_per_replica: int = 0  # tp; 0 = CPU replicas
    cpus_per_replica: float = 1.0  # logical CPUs a CPU replica reserves
    resource: str | None = None  # custom resource a CPU replica takes one unit of
    max_restarts: int = 3  # Ray restarts of a server actor whose server died
    namespace: str = "tailsieve"
    emulator_profile: str = "cpu"
    emulator_args: tuple[str, ...] = ()
    poll_interval_s: float = 0.5  # supervisor: how often addresses are checked
    object_store_mb: int = 128  # address=local only: Ray object store size
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S  # bound on connecting to the cluster

    def __post_init__(self) -> None:
        if not self.connect_timeout_s > 0:
            raise ConfigError(f"--connect-timeout must be > 0 s, got {self.connect_timeout_s:g}")
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"--placement must be spread or pack, got {self.placement!r}")
        if self.gpus_per_replica < 0 or self.cpus_per_replica < 0:
            raise ConfigError("gpus and cpus per replica must be >= 0")
        if self.max_restarts < 0:
            raise ConfigError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if sum(g.count for g in self.engines) != self.launch.replicas:
            raise ConfigError("engine groups and replicas disagree")
        uses_model = any(g.engine != "emulated" for g in self.engines)
        if uses_model and not self.launch.model:
            raise ConfigError("--model is required for vllm/sglang replicas")

    @property
    def bundle(self) -> dict[str, float]:
        if self.gpus_per_replica > 0:
            return {"GPU": float(self.gpus_per_replica), "CPU": float(self.cpus_per_replica)}
        out = {"CPU": float(self.cpus_per_replica)}
        if self.resource:
            out[self.resource] = 1.0
        return out


class RayFleet:
    """Places, supervises and stops the replica actors of one ``launch --ray``."""

    def __init__(self, config: RayLaunchConfig) -> None:
        self.config = config
        hp = split_host_port(config.address)
        if hp is None or hp[0] not in LOOPBACK_HOSTS:  # Ray resolves loopback: checked later
            check_reachable(config.address)  # HOST:PORT: before the (slow) Ray import
        self.ray = import_ray()
        self.run_id = uuid.uuid4().hex[:8]
        self.state: dict[str, Any] = {}
        self._local = config.address == "local"
        self._snapshot: ClusterSnapshot | None = None  # the connection probe's view

    @property
    def endpoints(self) -> list[str]:
        return list(self.state.get("endpoints", []))

    def connect(self) -> None:
        """Connect to the cluster within ``connect_timeout_s`` (``connect_ray``), or raise a
        one-line ``ConfigError``."""
        ray, cfg = self.ray, self.config
        if ray.is_initialized():
            return
        kw: dict[str, Any] = {"namespace": cfg.namespace, "log_to_driver": False}
        if self._local:
            kw |= {
                "include_dashboard": False,
                "object_store_memory": cfg.object_store_mb * 1024 * 1024,
            }
        self._snapshot = connect_ray(ray, cfg.address, cfg.connect_timeout_s, **kw)

    def _check_fits(self) -> None:
        """Refuse at once a placement that can never fit the cluster (``ConfigError``)."""
        ray, snap = self.ray, self._snapshot
        try:
            if snap is None:  # a local instance, or one connected before: ask it here
                nodes = [
                    {str(k): float(v) for k, v in n.get("Resources", {}).items()}
                    for n in ray.nodes()
                    if n.get("Alive")
                ]
                snap = ClusterSnapshot(ray.cluster_resources(), tuple(nodes))
            check_placement(
                self.config.bundle, self.config.launch.replicas, snap.total, snap.nodes
            )
        except ConfigError:
            if self._local and ray.is_initialized():
                ray.shutdown()
            raise

    def start(self) -> dict[str, Any]:
        """Place and start every replica, wait until healthy, write the state file."""
        ray, cfg = self.ray, self.config
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import (
            NodeAffinitySchedulingStrategy,
            PlacementGroupSchedulingStrategy,
        )

        self.connect()
        self._check_fits()
        lc = cfg.launch
        specs = build_specs(
            cfg.engines,
            lc,
            str(Path(lc.log_dir).resolve()),
            cfg.max_restarts,
            max(1, cfg.gpus_per_replica),
            cfg.emulator_profile,
            cfg.emulator_args,
        )
        lifetime = None if self._local else "detached"
        prefix = f"tailsieve-{self.run_id}"
        pg = placement_group(
            [cfg.bundle] * len(specs),
            strategy=PLACEMENTS[cfg.placement],
            name=f"{prefix}-pg",
            lifetime=lifetime,
        )
        self.state = {
            "endpoints": [],
            "replicas": [],
            "ray": {
                "address": _gcs_address(ray),
                "namespace": cfg.namespace,
                "placement_group": f"{prefix}-pg",
                "actors": [f"{prefix}-replica-{s.index}" for s in specs],
                "supervisor": f"{prefix}-supervisor",
                "placement": cfg.placement,
                "bundle": cfg.bundle,
            },
        }
        timeout_s = lc.health_timeout_s + 120.0
        try:
            if not pg.wait(timeout_seconds=int(timeout_s)):
                raise ReplicaError(
                    f"Ray could not place {len(specs)} replicas of {cfg.bundle} within "
                    f"{timeout_s:.0f} s; cluster resources: {ray.cluster_resources()}"
                )
            host_cls = ray.remote(RayServerHost)
            handles = [
                host_cls.options(
                    name=name,
                    lifetime=lifetime,
                    max_restarts=cfg.max_restarts,
                    max_task_retries=0,
                    num_cpus=cfg.cpus_per_replica,
                    num_gpus=cfg.gpus_per_replica,
                    resources=_actor_resources(cfg),
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=pg, placement_group_bundle_index=spec.index
                    ),
                ).remote(spec)
                for spec, name in zip(specs, self.state["ray"]["actors"], strict=True)
            ]
            try:
                rows = ray.get([h.info.remote() for h in handles], timeout=timeout_s)
            except ray.exceptions.RayError as exc:
                raise ReplicaError(f"a replica server did not start: {exc}") from None
            set_replicas(self.state, rows)
            path = str(lc.state_path.resolve())
            write_json_atomic(path, self.state)
            node = ray.get_runtime_context().get_node_id()
            sup = (
                ray.remote(Supervisor)
                .options(
                    name=self.state["ray"]["supervisor"],
                    lifetime=lifetime,
                    num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                )
                .remote(self.state, path, cfg.poll_interval_s)
            )
            ray.get(sup.ready.remote(), timeout=timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.state

    def stop(self) -> list[int]:
        """End every server, actor and the placement group this fleet started."""
        pids = stop_ray_state(self.ray, self.state) if self.state else []
        with contextlib.suppress(OSError):
            self.config.launch.state_path.unlink(missing_ok=True)
        if self._local and self.ray.is_initialized():
            self.ray.shutdown()
        return pids


class RayServerHost(ServerHost):
    """``ServerHost`` told its node's address and whether Ray restarted it."""

    def __init__(self, spec: ServerSpec) -> None:
        ray = import_ray()
        ctx = ray.get_runtime_context()
        super().__init__(
            spec,
            ray.util.get_node_ip_address(),
            ctx.get_node_id(),
            bool(ctx.was_current_actor_reconstructed),
        )


def _actor_resources(cfg: RayLaunchConfig) -> dict[str, float]:
    return {cfg.resource: 1.0} if cfg.resource and not cfg.gpus_per_replica else {}


def _gcs_address(ray: Any) -> str:
    with contextlib.suppress(Exception):
        return str(ray.get_runtime_context().gcs_address)
    return os.environ.get("RAY_ADDRESS", "auto")
