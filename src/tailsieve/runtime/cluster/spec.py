"""What one replica server is: engine, command line, ports, pool. Built on the launching
machine, pickled to the Ray actor that starts (and restarts) the server on its node.

Engines: ``vllm`` (``vllm.entrypoints.openai.api_server``, the same command as the local
``tailsieve launch``), ``sglang`` (``sglang.launch_server``) and ``emulated`` (TailSieve's
emulated vLLM replica, for tests and dry runs; its speculative pool runs the throughput profile
with the pool's speculation applied).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.runtime.launcher import LaunchConfig
from tailsieve.runtime.spec_flags import PoolSpeculation

ENGINES: tuple[str, ...] = ("vllm", "sglang", "emulated")


@dataclass(frozen=True, slots=True)
class EngineGroup:
    """``count`` replicas of one engine; replica k of the group first listens on ``port + k``."""

    engine: str  # vllm | sglang | emulated
    count: int = 1
    port: int = 8101

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r}; choose {', '.join(ENGINES)}")
        if self.count < 1:
            raise ConfigError(f"engine {self.engine}: count must be >= 1, got {self.count}")
        if not 1 <= self.port <= 65535 - self.count:
            raise ConfigError(f"engine {self.engine}: port {self.port} out of range")

    @classmethod
    def parse_list(cls, text: str, default_port: int) -> tuple[EngineGroup, ...]:
        """``ENGINE[*COUNT][@PORT],...`` e.g. ``emulated*4@8310,vllm@8301``; a group without
        ``@PORT`` continues after the previous group's ports (the first at ``default_port``)."""
        out: list[EngineGroup] = []
        port = default_port
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            head, _, at = part.partition("@")
            name, _, count = head.partition("*")
            try:
                n = int(count) if count else 1
                port = int(at) if at else port
            except ValueError:
                raise ConfigError(f"engine group {part!r}: expected ENGINE[*COUNT][@PORT]") from None
            out.append(cls(name.strip().lower(), n, port))
            port += n
        if not out:
            raise ConfigError("no engine given (e.g. --engines vllm*4)")
        return tuple(out)


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """Replica ``index``: how to start its server on whatever node its actor lands on."""

    index: int
    engine: str
    pool: str  # tail | bulk
    spec: str  # the pool's speculative config, e.g. "mtp:3" or "none"
    ports: tuple[int, ...]  # first choice, then the ones tried after a restart (first free)
    log_dir: str  # on the actor's node
    launch: LaunchConfig  # model, python, served name, vLLM/SGLang flags
    tensor_parallel: int = 1  # GPUs per replica (vLLM/SGLang --tensor-parallel-size)
    emulator_args: tuple[str, ...] = ()  # extra flags of the emulated replica
    emulator_profile: str = "cpu"  # name or JSON of the emulated replica's profile
    health_timeout_s: float = 300.0
    files: dict[str, str] = field(default_factory=dict)  # written to log_dir before starting

    def command(self, host: str, port: int, workdir: str) -> tuple[list[str], dict[str, str]]:
        """argv and extra environment of the server listening on ``host:port``; ``files`` are
        in ``workdir``."""
        if self.engine == "vllm":
            argv, env = self.launch.command(self.index, host, port)
            if self.tensor_parallel > 1:
                argv += ["--tensor-parallel-size", str(self.tensor_parallel)]
            return argv, env
        if self.engine == "sglang":
            return self._sglang(host, port), {"HF_HUB_OFFLINE": "1"}
        return self._emulated(host, port, workdir), {}

    def _sglang(self, host: str, port: int) -> list[str]:
        cfg = self.launch
        argv = [
            cfg.python, "-m", "sglang.launch_server", "--model-path", cfg.model,
            "--served-model-name", cfg.served_model_name, "--host", host, "--port", str(port),
            "--tp", str(self.tensor_parallel), "--context-length", str(cfg.max_model_len),
        ]  # fmt: skip
        argv += PoolSpeculation.parse(self.spec).sglang_args()
        return argv + list(cfg.extra_args)

    def _emulated(self, host: str, port: int, workdir: str) -> list[str]:
        profile = f"{workdir}/profile.json" if "profile.json" in self.files else self.emulator_profile
        return [
            sys.executable, "-m", "tailsieve.runtime.emulator", "--host", host, "--port",
            str(port), "--profile", profile, "--model-name", self.launch.served_model_name,
            "--seed", str(self.index), *self.emulator_args,
        ]  # fmt: skip


def build_specs(
    groups: tuple[EngineGroup, ...],
    launch: LaunchConfig,
    log_dir: str,
    max_restarts: int,
    tensor_parallel: int = 1,
    emulator_profile: str = "cpu",
    emulator_args: tuple[str, ...] = (),
) -> list[ServerSpec]:
    """One spec per replica, in replica order; the last ``launch.tail_replicas`` are the tail
    pool. A restarted server takes the next free port of ``port + k * count`` (k = 1, 2, ...):
    a new address, as on a real cluster where the actor may come back on another node."""
    total = sum(g.count for g in groups)
    if launch.replicas != total:
        raise ConfigError(f"engine groups hold {total} replicas, launch config {launch.replicas}")
    out: list[ServerSpec] = []
    for g in groups:
        for k in range(g.count):
            i = len(out)
            is_tail = i >= total - launch.tail_replicas
            spec = launch.tail_spec if is_tail else launch.bulk_spec
            files: dict[str, str] = {}
            pool_spec = PoolSpeculation.parse(spec)
            if g.engine == "emulated" and pool_spec.enabled:
                fast = pool_spec.spec_config().apply(load_profile(emulator_profile))
                files["profile.json"] = json.dumps(fast.to_dict())
            ports = tuple(g.port + k + j * g.count for j in range(max_restarts + 2))
            if ports[-1] > 65535:
                raise ConfigError(f"replica {i}: restart ports run past 65535")
            out.append(
                ServerSpec(
                    index=i,
                    engine=g.engine,
                    pool="tail" if is_tail else "bulk",
                    spec=spec,
                    ports=ports,
                    log_dir=log_dir,
                    launch=launch,
                    tensor_parallel=tensor_parallel,
                    emulator_args=emulator_args,
                    emulator_profile=emulator_profile,
                    health_timeout_s=launch.health_timeout_s,
                    files=files,
                )
            )
    return out
