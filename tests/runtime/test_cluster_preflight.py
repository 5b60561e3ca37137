"""``launch --ray`` refuses in seconds what would otherwise wait for minutes: an address where
no Ray GCS listens, and a placement whose bundles exceed the cluster's total resources."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tailsieve.errors import ConfigError
from tailsieve.runtime.cluster.preflight import (
    check_placement,
    check_reachable,
    split_host_port,
    tcp_reachable,
)

CLI = "import sys; from tailsieve.cli.main import main; sys.exit(main())"


def closed_port() -> int:
    """A local port where nothing listens (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:6379", ("127.0.0.1", 6379)),
        ("ray://head.example:10001", ("head.example", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        ("auto", None),
        ("local", None),
        ("head.example", None),
        ("head.example:port", None),
    ],
)
def test_split_host_port(address: str, expected: tuple[str, int] | None) -> None:
    assert split_host_port(address) == expected


def test_closed_port_is_refused_in_seconds() -> None:
    port = closed_port()
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=f"cannot reach Ray at 127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}", timeout_s=2.0)
    assert time.monotonic() - t0 < 5.0
    assert tcp_reachable("127.0.0.1", 0) == "port 0 is out of range"


def test_listening_port_passes() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        check_reachable(f"127.0.0.1:{port}")
        assert tcp_reachable("127.0.0.1", port) is None


def test_auto_is_checked_where_ray_resolves_it() -> None:
    port = closed_port()
    with pytest.raises(ConfigError, match=rf"auto \(127.0.0.1:{port}\)"):
        check_reachable("auto", resolve=lambda _: f"127.0.0.1:{port}", timeout_s=1.0)

    def no_cluster(_: str) -> str | None:
        raise ConnectionError("Could not find any running Ray instance")

    check_reachable("auto", resolve=no_cluster)  # Ray says so itself, quickly
    check_reachable("local")  # starts its own instance: nothing to reach


def test_placement_exceeding_the_cluster_is_refused() -> None:
    total = {"CPU": 6.0, "memory": 1e9, "node:127.0.0.1": 1.0}
    with pytest.raises(ConfigError, match=r"50 replicas of \{CPU: 1\}.*CPU 50 > 6"):
        check_placement({"CPU": 1.0}, 50, total)
    check_placement({"CPU": 1.0}, 6, total)  # exactly full fits
    with pytest.raises(ConfigError, match="GPU 4 > 0"):
        check_placement({"GPU": 2.0, "CPU": 1.0}, 2, total)
    with pytest.raises(ConfigError, match="tailsieve_replica 3 > 2"):
        check_placement(
            {"CPU": 1.0, "tailsieve_replica": 1.0}, 3, {**total, "tailsieve_replica": 2}
        )


def test_bundle_larger_than_every_node_is_refused() -> None:
    nodes = [{"CPU": 3.0}, {"CPU": 3.0}]
    with pytest.raises(ConfigError, match=r"no Ray node can hold one replica's bundle \{CPU: 4\}"):
        check_placement({"CPU": 4.0}, 1, {"CPU": 6.0}, nodes)
    check_placement({"CPU": 3.0}, 2, {"CPU": 6.0}, nodes)


def run_cli(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=timeout_s
    )


def test_launch_ray_unreachable_address_exits_2_fast(tmp_path: object) -> None:
    pytest.importorskip("ray", reason="Ray not installed (pip install 'tailsieve[ray]')")
    t0 = time.monotonic()
    res = run_cli("launch", "--ray", "--address", "127.0.0.1:1", "--engines", "emulated*2")
    elapsed = time.monotonic() - t0
    assert res.returncode == 2, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [errors[0]] and "cannot reach Ray at 127.0.0.1:1" in errors[0]
    assert "Traceback" not in res.stderr
    assert elapsed < 30.0
    print(f"\nlaunch --ray --address 127.0.0.1:1: exit 2 after {elapsed:.1f} s")


@pytest.mark.slow
def test_launch_ray_impossible_placement_exits_2_fast(tmp_path: os.PathLike[str]) -> None:
    """50 replicas on a real local Ray cluster with 6 CPUs: refused at once, nothing placed."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray = pytest.importorskip("ray", reason="Ray not installed (pip install 'tailsieve[ray]')")
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 6,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "object_store_memory": 80 * 1024 * 1024,
        },
    )
    try:
        state = os.path.join(tmp_path, "state.json")
        t0 = time.monotonic()
        res = run_cli(
            "launch", "--ray", "--address", c.address, "--engines", "emulated*50",
            "--cpus-per-replica", "1", "--state-file", state, "--log-dir",
            os.path.join(tmp_path, "launch"), "--detach",
        )  # fmt: skip
        elapsed = time.monotonic() - t0
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "CPU 50 > 6" in errors[0], res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert not os.path.exists(state)
    assert elapsed < 30.0
    print(f"\n50 replicas on 6 CPUs: exit 2 after {elapsed:.1f} s")


def test_connect_ray_resolves_auto_and_never_calls_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--address auto`` with ``RAY_ADDRESS`` naming a dead head: refused before ``ray.init``."""
    pytest.importorskip("ray", reason="Ray not installed (pip install 'tailsieve[ray]')")
    from types import SimpleNamespace

    from tailsieve.runtime.cluster.stop import connect_ray

    port = closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")

    def init(**kw: object) -> None:
        raise AssertionError("ray.init must not be called")

    # (Ray canonicalizes 127.0.0.1 to the node address)
    with pytest.raises(ConfigError, match=rf"cannot reach Ray at auto \([^)]*:{port}\)"):
        connect_ray(SimpleNamespace(init=init), "auto")
