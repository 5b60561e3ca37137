"""Start R local vLLM OpenAI-compatible servers (one per core or GPU), wait for health, write a
state file, and stop exactly what was started.

Replicas ``R-m .. R-1`` form the tail pool (the protocol's convention) and get ``tail_spec``;
the others get ``bulk_spec``. vLLM cannot change ``--speculative-config`` without a restart, so
with different per-pool configs hold ``m`` fixed in the controller (``m0 = tail_replicas``,
policy ``tailsieve-fixed``).

::

    async with VllmFleet(LaunchConfig(model="/models/tiny", replicas=2)) as fleet:
        fleet.endpoints        # ["http://127.0.0.1:8101", "http://127.0.0.1:8102"]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.engine.transport import AiohttpTransport, probe_health
from tailsieve.runtime.spec_flags import PoolSpeculation


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """How to start the replicas."""

    model: str  # model directory (or name the server can load offline)
    replicas: int = 2  # R
    base_port: int = 8101  # replica i listens on base_port + i
    python: str = field(default_factory=lambda: os.environ.get("TAILSIEVE_VLLM_PYTHON", "python"))
    cores: tuple[int, ...] | None = None  # CPU build: one core per replica
    gpus: tuple[str, ...] | None = None  # GPU build: CUDA_VISIBLE_DEVICES per replica
    served_model_name: str = "default"
    tail_spec: str = "none"  # e.g. "mtp:3", "suffix:8" (runtime.spec_flags)
    bulk_spec: str = "none"
    tail_replicas: int = 0  # m: replicas started with tail_spec (the last m)
    max_model_len: int = 1024
    dtype: str = "bfloat16"
    kv_cache_gb: int = 1  # VLLM_CPU_KVCACHE_SPACE (CPU build)
    extra_args: tuple[str, ...] = ()
    health_timeout_s: float = 300.0
    log_dir: str = ".cache/tailsieve-launch"
    state_file: str | None = None  # default: <log_dir>/state.json

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ConfigError(f"replicas must be >= 1, got {self.replicas}")
        if not (0 <= self.tail_replicas <= self.replicas - 1):
            raise ConfigError(f"tail_replicas must be in [0, R-1], got {self.tail_replicas}")
        if self.cores is not None and self.gpus is not None:
            raise ConfigError("give --cores or --gpus, not both")
        for name, devs in (("cores", self.cores), ("gpus", self.gpus)):
            if devs is not None and len(devs) < self.replicas:
                raise ConfigError(f"{name}: need {self.replicas} entries, got {len(devs)}")
        PoolSpeculation.parse(self.tail_spec)
        PoolSpeculation.parse(self.bulk_spec)

    @property
    def state_path(self) -> Path:
        return Path(self.state_file) if self.state_file else Path(self.log_dir) / "state.json"

    def command(
        self, i: int, host: str = "127.0.0.1", port: int | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """argv and extra environment of replica ``i`` (listening on ``host:port``, default
        ``127.0.0.1:base_port + i``)."""
        argv = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--enforce-eager",
            "--dtype",
            self.dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--host",
            host,
            "--port",
            str(self.base_port + i if port is None else port),
        ]
        is_tail = i >= self.replicas - self.tail_replicas
        argv += PoolSpeculation.parse(self.tail_spec if is_tail else self.bulk_spec).vllm_args()
        argv += list(self.extra_args)
        env = {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gb),
        }
        if self.cores is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(self.cores[i])
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpus[i])
        return argv, env


@dataclass(frozen=True, slots=True)
class ReplicaProcess:
    """One started server."""

    index: int
    pid: int  # also its process-group id (own session)
    port: int
    endpoint: str
    log_file: str
    pool: str  # tail | bulk


def log_tail(path: str, n: int = 30) -> str:
    """The last ``n`` lines of a server's log (``<no log>`` when it cannot be read)."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "<no log>"


def stop_pids(pids: list[int], grace_s: float = 20.0) -> None:
    """SIGTERM each process group, then SIGKILL the groups still alive after ``grace_s``."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _group_alive(p)]
        if alive:
            time.sleep(0.1)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _group_alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap the leader when it is our child
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_from_state(path: str | Path) -> list[int]:
    """Stop the servers named in a state file written by ``VllmFleet``; returns their PIDs."""
    data = json.loads(Path(path).read_text())
    pids = [int(r["pid"]) for r in data["replicas"]]
    stop_pids(pids)
    Path(path).unlink(missing_ok=True)
    return pids


class VllmFleet:
    """Starts and stops the replicas; async (``async with``) or sync (``with``) context."""

    def __init__(self, config: LaunchConfig) -> None:
        self.config = config
        self.replicas: list[ReplicaProcess] = []
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def endpoints(self) -> list[str]:
        return [r.endpoint for r in self.replicas]

    def start_processes(self) -> None:
        cfg = self.config
        Path(cfg.log_dir).mkdir(parents=True, exist_ok=True)
        for i in range(cfg.replicas):
            argv, extra = cfg.command(i)
            port = cfg.base_port + i
            log = str(Path(cfg.log_dir) / f"server-{port}.log")
            with open(log, "wb") as fh:
                proc = subprocess.Popen(
                    argv,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **extra},
                    start_new_session=True,
                )
            self._procs.append(proc)
            pool = "tail" if i >= cfg.replicas - cfg.tail_replicas else "bulk"
            self.replicas.append(
                ReplicaProcess(i, proc.pid, port, f"http://127.0.0.1:{port}", log, pool)
            )
        self.write_state()

    def write_state(self) -> None:
        state: dict[str, Any] = {
            "endpoints": self.endpoints,
            "replicas": [asdict(r) for r in self.replicas],
            "commands": [shlex.join(self.config.command(i)[0]) for i in range(len(self.replicas))],
        }
        self.config.state_path.parent.mkdir(parents=True, exist_ok=True)
        self.config.state_path.write_text(json.dumps(state, indent=2))

    async def wait_healthy(self) -> None:
        """Poll /health on every replica; raise ``ReplicaError`` (with the log tail) when one dies
        or the timeout passes. Stops everything on failure."""
        t = AiohttpTransport()
        deadline = time.monotonic() + self.config.health_timeout_s
        try:
            for rep, proc in zip(self.replicas, self._procs, strict=True):
                while True:
                    if proc.poll() is not None:
                        raise ReplicaError(
                            f"vLLM replica {rep.index} (pid {rep.pid}, port {rep.port}) exited "
                            f"with code {proc.returncode}; last log lines of {rep.log_file}:\n"
                            f"{log_tail(rep.log_file)}"
                        )
                    if not await probe_health(t, rep.endpoint, 2.0):
                        break
                    if time.monotonic() > deadline:
                        raise ReplicaError(
                            f"vLLM replica {rep.index} (port {rep.port}) not healthy after "
                            f"{self.config.health_timeout_s:.0f} s; last log lines of "
                            f"{rep.log_file}:\n{log_tail(rep.log_file)}"
                        )
                    await asyncio.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        finally:
            await t.aclose()

    def stop(self) -> None:
        """Stop every process this fleet started (process groups) and remove the state file."""
        stop_pids([p.pid for p in self._procs])
        for p in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=1)
        self._procs.clear()
        self.config.state_path.unlink(missing_ok=True)

    async def __aenter__(self) -> VllmFleet:
        self.start_processes()
        await self.wait_healthy()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> VllmFleet:
        self.start_processes()
        asyncio.run(self.wait_healthy())
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
