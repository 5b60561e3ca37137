"""``launch --ray`` refuses in seconds what would otherwise wait for minutes: an address where
no Ray GCS listens, a port that accepts TCP but where no Ray GCS answers (bounded by
``--connect-timeout``), and a placement whose bundles exceed the cluster's total resources.

No check depends on the machine's speed: which check refused is read from the one error line
(the TCP pre-check, the probe killed at ``--connect-timeout``, the placement check), and a
bounded wait is shown to have waited at least its bound; the subprocess timeouts only end a
hang (``HANG_GUARD_S``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailsieve.errors import ConfigError
from tailsieve.runtime.cluster.connect import (
    LOOPBACK_ENV,
    probe_message,
    ray_detail,
    unreachable_message,
)
from tailsieve.runtime.cluster.preflight import (
    check_placement,
    check_reachable,
    split_host_port,
    tcp_reachable,
)

CLI = "import sys; from tailsieve.cli.main import main; sys.exit(main())"
HANG_GUARD_S = 600.0  # ends a command that would never end; not a speed requirement


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


def test_closed_port_is_refused_by_the_tcp_check() -> None:
    port = closed_port()
    with pytest.raises(ConfigError, match=f"cannot reach Ray at 127.0.0.1:{port}.*TCP connect"):
        check_reachable(f"127.0.0.1:{port}", timeout_s=2.0)
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


def run_cli(
    *args: str, timeout_s: float = HANG_GUARD_S, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
    )


def test_loopback_head_message_names_both_addresses_and_the_fixes() -> None:
    line = unreachable_message(
        "127.0.0.1:6379", "10.1.2.3:6379", "Connection refused", given_open=True
    )
    assert line.startswith("cannot connect to Ray at 127.0.0.1:6379: ")
    for part in (
        "connects to 10.1.2.3:6379, which refused (Connection refused)",
        "listens on loopback only",
        "ray start --head --node-ip-address 10.1.2.3 --port 6379",
        "--address 10.1.2.3:6379 (or RAY_ADDRESS)",
        f"{LOOPBACK_ENV}=0",
    ):
        assert part in line
    assert "\n" not in line
    # loopback given but closed too: nothing listens at all, the plain message
    line = unreachable_message("127.0.0.1:6379", "10.1.2.3:6379", "refused", given_open=False)
    assert line.startswith("cannot reach Ray at 127.0.0.1:6379 (10.1.2.3:6379): TCP connect")
    assert "--address" in line and "RAY_ADDRESS" in line


def test_probe_message_says_what_answered() -> None:
    line = probe_message("h:1", "h:1", 7.0, True, "Failed to connect to GCS at address h:1")
    assert "h:1 accepts TCP connections, but Ray did not connect to h:1 within 7 s" in line
    assert "Ray's last message: Failed to connect to GCS at address h:1" in line
    assert "--connect-timeout" in line and "RAY_ADDRESS" in line
    line = probe_message("auto", "h:1", 7.0, False, "ConnectionError: version mismatch")
    assert line.startswith("cannot connect to Ray at auto (Ray connects to h:1): ConnectionError")


def test_ray_detail_keeps_the_last_warning_without_its_prefix() -> None:
    err = (
        "2026-12-02 17:14:16,809\tINFO worker.py:1841 -- Connecting to existing Ray cluster\n"
        "[2026-12-02 17:14:21,815 W 6929 6929] rpc_client.h:153: Failed to connect to GCS at "
        "address 192.0.2.2:33597 within 5 seconds.\n"
    )
    assert ray_detail(err) == "Failed to connect to GCS at address 192.0.2.2:33597 within 5 seconds."
    assert ray_detail(err.splitlines()[0]) == ""  # INFO only: nothing worth saying
    assert ray_detail("Traceback\n  x\nValueError: bad") == "ValueError: bad"
    assert len(ray_detail("E " * 500, limit=50)) == 50


class SilentListener:
    """A TCP port on 127.0.0.1 that accepts connections and never answers (no Ray GCS)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                continue

    def all_closed_by_peer(self, timeout_s: float = 60.0) -> bool:
        """Every accepted connection reads EOF: no process still holds one open."""
        deadline = time.monotonic() + timeout_s
        for conn in list(self.accepted):
            while True:
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    if conn.recv(65536) == b"":
                        break
                except (ConnectionResetError, BrokenPipeError):
                    break
                except TimeoutError:
                    return False
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in [*self.accepted, self.sock]:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentListener]:
    srv = SilentListener()
    yield srv
    srv.close()


def probe_pids(address: str) -> list[int]:
    """PIDs of connection probes (``connect.py``'s child) still running for ``address``."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"ray.init(address=sys.argv[1]" in b" ".join(cmd) and address.encode() in cmd:
                out.append(int(proc.name))
    return out


@pytest.mark.slow
def test_launch_ray_port_without_gcs_fails_within_connect_timeout(
    silent: SilentListener, tmp_path: Path
) -> None:
    """The port accepts TCP but no Ray GCS answers: ``ray.init`` would retry for minutes; the
    launch fails at ``--connect-timeout`` with one line, and nothing of the probe is left."""
    pytest.importorskip("ray", reason="Ray not installed (pip install 'tailsieve[ray]')")
    address = f"127.0.0.1:{silent.port}"
    t0 = time.monotonic()
    res = run_cli(
        "launch", "--ray", "--address", address, "--engines", "emulated*2",
        "--connect-timeout", "4", "--state-file", str(tmp_path / "state.json"),
        env={LOOPBACK_ENV: "0"},  # Ray keeps 127.0.0.1: it connects to the listener
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, res.stderr[-2000:]
    assert f"{address} accepts TCP connections, but Ray did not connect to" in errors[0]
    assert "within 4 s" in errors[0]  # the probe was ended at the deadline (not by Ray)
    assert "Traceback" not in res.stderr
    assert elapsed >= 4.0
    assert silent.accepted, "the probe never reached the port"
    assert silent.all_closed_by_peer(), "a probe process still holds its connection"
    assert probe_pids(address) == []
    assert not (tmp_path / "state.json").exists()
    print(f"\nport without a GCS, --connect-timeout 4: exit 2 after {elapsed:.1f} s")


@pytest.mark.slow
def test_stop_ray_state_connect_is_bounded(silent: SilentListener, tmp_path: Path) -> None:
    """``launch --stop STATE`` whose cluster address accepts TCP but never answers: one line at
    ``--connect-timeout``; the state file is kept (nothing was stopped)."""
    pytest.importorskip("ray", reason="Ray not installed (pip install 'tailsieve[ray]')")
    address = f"127.0.0.1:{silent.port}"
    state = tmp_path / "state.json"
    ray_info = {"address": address, "namespace": "tailsieve", "placement_group": "pg",
                "actors": ["a"], "supervisor": "s"}  # fmt: skip
    state.write_text(json.dumps({"endpoints": [], "replicas": [], "ray": ray_info}))
    t0 = time.monotonic()
    res = run_cli("launch", "--stop", str(state), "--connect-timeout", "3", env={LOOPBACK_ENV: "0"})
    elapsed = time.monotonic() - t0
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"did not connect to {address} within 3 s" in errors[0]
    assert elapsed >= 3.0 and state.exists()
    assert silent.all_closed_by_peer() and probe_pids(address) == []


def test_python_api_connect_is_bounded(
    silent: SilentListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RayLaunchConfig(connect_timeout_s=...)``: ``RayFleet.start`` raises ``ConfigError``
    at the deadline and this process never connected (no Ray driver, thread or probe left)."""
    ray = pytest.importorskip("ray", reason="Ray not installed (pip install 'tailsieve[ray]')")
    import ray._private.ray_constants as ray_constants

    from tailsieve.runtime.cluster.fleet import RayFleet, RayLaunchConfig
    from tailsieve.runtime.cluster.spec import EngineGroup
    from tailsieve.runtime.launcher import LaunchConfig

    monkeypatch.setenv(LOOPBACK_ENV, "0")  # the probe (a child) keeps 127.0.0.1
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)  # and so does this process
    address = f"127.0.0.1:{silent.port}"
    launch = LaunchConfig(model="", replicas=2)
    groups = (EngineGroup("emulated", 2, 8100),)
    with pytest.raises(ConfigError, match="connect-timeout must be > 0"):
        RayLaunchConfig(engines=groups, launch=launch, address=address, connect_timeout_s=0)
    cfg = RayLaunchConfig(engines=groups, launch=launch, address=address, connect_timeout_s=3)
    threads = threading.active_count()
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=rf"did not connect to {address} within 3 s"):
        RayFleet(cfg).start()
    elapsed = time.monotonic() - t0
    assert elapsed >= 3.0
    assert not ray.is_initialized()
    assert threading.active_count() <= threads
    assert silent.all_closed_by_peer() and probe_pids(address) == []


def test_launch_ray_unreachable_address_exits_2_fast(tmp_path: object) -> None:
    pytest.importorskip("ray", reason="Ray not installed (pip install 'tailsieve[ray]')")
    t0 = time.monotonic()
    res = run_cli("launch", "--ray", "--address", "127.0.0.1:1", "--engines", "emulated*2")
    elapsed = time.monotonic() - t0
    assert res.returncode == 2, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [errors[0]] and "cannot reach Ray at 127.0.0.1:1" in errors[0]
    assert "TCP connect" in errors[0]  # the pre-check refused: ray.init never ran
    assert "Traceback" not in res.stderr
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
    assert not os.path.exists(state)  # refused by the placement check, before any placement
    print(f"\n50 replicas on 6 CPUs: exit 2 after {elapsed:.1f} s")


def test_connect_ray_resolves_auto_and_never_calls_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--address auto`` with ``RAY_ADDRESS`` naming a dead head: refused before ``ray.init``."""
    pytest.importorskip("ray", reason="Ray not installed (pip install 'tailsieve[ray]')")
    from types import SimpleNamespace

    from tailsieve.runtime.cluster.connect import connect_ray

    port = closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")

    def init(**kw: object) -> None:
        raise AssertionError("ray.init must not be called")

    # (Ray canonicalizes 127.0.0.1 to the node address)
    with pytest.raises(ConfigError, match=rf"cannot reach Ray at auto \([^)]*:{port}\)"):
        connect_ray(SimpleNamespace(init=init), "auto")
