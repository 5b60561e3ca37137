"""The vLLM launcher, with a fake ``vllm.entrypoints.openai.api_server`` module (no vLLM needed)."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.launcher import LaunchConfig, VllmFleet, stop_from_state

FAKE_SERVER = textwrap.dedent(
    """
    import os, sys, json
    from aiohttp import web
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    print("fake vllm", json.dumps({"argv": args, "bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
          "offline": os.environ.get("HF_HUB_OFFLINE")}), flush=True)
    if os.environ.get("FAKE_VLLM_DIE"):
        print("RuntimeError: boom while loading the model", flush=True)
        sys.exit(3)
    async def health(_):
        return web.Response(text="")
    app = web.Application()
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None)
    """
)


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(FAKE_SERVER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    return tmp_path


def free_ports(n: int) -> int:
    for base in range(18500, 19500, 10):
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return base
    raise RuntimeError("no free ports")


def cfg(tmp: Path, **kw: object) -> LaunchConfig:
    base: dict[str, object] = dict(
        model="/models/tiny",
        replicas=2,
        base_port=free_ports(2),
        python=sys.executable,
        cores=(0, 1),
        log_dir=str(tmp / "logs"),
        health_timeout_s=30.0,
        tail_spec="mtp:3",
        tail_replicas=1,
        served_model_name="tiny",
    )
    base.update(kw)
    return LaunchConfig(**base)  # type: ignore[arg-type]


def test_command_per_pool(tmp_path: Path) -> None:
    c = cfg(tmp_path)
    argv0, env0 = c.command(0)
    argv1, env1 = c.command(1)
    assert "--speculative-config" not in argv0
    spec = json.loads(argv1[argv1.index("--speculative-config") + 1])
    assert spec == {"method": "mtp", "num_speculative_tokens": 3}
    assert env0["VLLM_CPU_OMP_THREADS_BIND"] == "0" and env1["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert env0["HF_HUB_OFFLINE"] == "1" and env0["VLLM_CPU_KVCACHE_SPACE"] == "1"
    for flag in ("--enforce-eager", "--host", "--max-model-len", "--served-model-name"):
        assert flag in argv0
    assert argv0[argv0.index("--host") + 1] == "127.0.0.1"
    g = cfg(tmp_path, cores=None, gpus=("0", "1"))
    assert g.command(1)[1]["CUDA_VISIBLE_DEVICES"] == "1"
    with pytest.raises(ConfigError):
        cfg(tmp_path, cores=(0,))
    with pytest.raises(ConfigError):
        cfg(tmp_path, tail_replicas=2)


async def test_fleet_starts_waits_and_stops(fake_vllm: Path) -> None:
    c = cfg(fake_vllm)
    async with VllmFleet(c) as fleet:
        assert len(fleet.endpoints) == 2
        state = json.loads(c.state_path.read_text())
        assert state["endpoints"] == fleet.endpoints
        pids = [r["pid"] for r in state["replicas"]]
        assert all(os.path.exists(f"/proc/{p}") for p in pids)
    assert not c.state_path.exists()
    for p in pids:
        assert not os.path.exists(f"/proc/{p}") or "zombie" in Path(f"/proc/{p}/status").read_text()


async def test_dead_server_reports_log_tail(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_DIE", "1")
    with pytest.raises(ReplicaError, match="boom while loading"):
        async with VllmFleet(cfg(fake_vllm)):
            pass


def test_sync_context_and_stop_from_state(fake_vllm: Path) -> None:
    c = cfg(fake_vllm)
    fleet = VllmFleet(c)
    with fleet:
        assert c.state_path.exists()
        copy = fake_vllm / "state-copy.json"
        copy.write_text(c.state_path.read_text())
    stop_from_state(copy)  # already stopped: still fine
    assert not copy.exists()
