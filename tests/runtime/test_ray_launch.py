"""``launch --ray`` on a local Ray cluster of a head and two simulated nodes.

Emulated replicas on both nodes plus one real vLLM CPU server (when the vLLM venv and the tiny
model are there: TAILSIEVE_VLLM_PYTHON, TAILSIEVE_TINY_MODEL_DIR as scripts/test.sh exports);
``rollout --state`` runs TailSieve steps across them; an emulated server process is SIGKILLed
mid-step; Ray restarts its actor, which starts a new server at a new port; the supervisor
rewrites the state file, the router follows it and re-admits the replica; every prompt is
delivered exactly once; ``launch --stop`` leaves no server process and no actor.

Ray's services bind 127.0.0.1 only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray take the
loopback address as the node address; the head is started with ``node_ip_address=127.0.0.1``).
Without that variable, Ray replaces ``--address 127.0.0.1:PORT`` with this node's interface
address, where the loopback-only GCS does not listen: the launch must then fail in seconds with
one line (it used to retry for minutes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: loopback only
ray = pytest.importorskip("ray", reason="Ray not installed (pip install 'tailsieve[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(
    os.environ.get("TAILSIEVE_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
)
MODEL_DIR = Path(os.environ.get("TAILSIEVE_TINY_MODEL_DIR", str(ROOT / ".cache" / "tiny-qwen2")))
HAS_VLLM = VLLM_PYTHON.exists() and MODEL_DIR.joinpath("config.json").exists()
EMULATED_PORT, VLLM_PORT = 8310, 8301
OBJECT_STORE = 80 * 1024 * 1024
GROUPS, GROUP_SIZE, STEPS = 8, 4, 5
HANG_GUARD_S = 120.0  # the least any wait on state gives before it calls the test hung


def cli(*args: str, timeout_s: float = 240.0, env: dict[str, str] | None = None) -> str:
    code = "import sys; from tailsieve.cli.main import main; sys.exit(main())"
    res = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
    )
    assert res.returncode == 0, f"tailsieve {args[0]} failed:\n{res.stdout}\n{res.stderr[-3000:]}"
    return res.stdout


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "object_store_memory": OBJECT_STORE,
        },
    )
    try:
        for name in ("a", "b"):
            c.add_node(
                num_cpus=3,
                resources={"tailsieve_replica": 3, f"node_{name}": 1},
                node_ip_address="127.0.0.1",
                object_store_memory=OBJECT_STORE,
            )
        c.wait_for_nodes()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def metric(url: str, name: str) -> float:
    """The sum of a replica's Prometheus samples named ``name`` (0 when it does not answer)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + " ") or line.startswith(name + "{")
    )


def running(url: str) -> float:
    return metric(url, "vllm:num_requests_running")


def restarted_healthy(state_file: Path, victim: dict[str, Any]) -> bool:
    """The launcher's state names a new process for the victim's slot and it answers /health."""
    try:
        rep = json.loads(state_file.read_text())["replicas"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return False
    if not rep.get("restarted") or rep["pid"] == victim["pid"]:
        return False
    try:
        with urllib.request.urlopen(rep["endpoint"] + "/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(cond: Any, timeout_s: float, what: str) -> None:
    """Wait on state; ``timeout_s`` (at least ``HANG_GUARD_S``) only ends a hang."""
    deadline = time.monotonic() + max(timeout_s, HANG_GUARD_S)
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def state_file(tmp_path: Path) -> Iterator[Path]:
    """The launch state file; whatever it still names is stopped when the test fails."""
    path = tmp_path / "state.json"
    yield path
    if path.exists():
        subprocess.run(
            [sys.executable, "-c", "import sys; from tailsieve.cli.main import main; "
             "sys.exit(main())", "launch", "--stop", str(path)], timeout=120, check=False,
        )  # fmt: skip


def node_address() -> str:
    """This node's address as Ray sees it when it may run a multi-node cluster."""
    from ray._raylet import node_ip_address_from_perspective

    return str(node_ip_address_from_perspective())


def without_loopback_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}


def test_loopback_head_fails_fast_with_one_line(cluster: Cluster, tmp_path: Path) -> None:
    """The reported case: head on 127.0.0.1, ``--address 127.0.0.1:PORT``, default
    ``--connect-timeout`` (30 s): refused in seconds, naming where Ray connected and the fixes."""
    node = node_address()
    if node in ("127.0.0.1", "::1"):
        pytest.skip("this machine has no address but loopback: Ray keeps 127.0.0.1")
    port = cluster.address.rsplit(":", 1)[1]
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-c", "import sys; from tailsieve.cli.main import main; sys.exit(main())",
         "launch", "--ray", "--address", cluster.address, "--engines", "emulated*5",
         "--state-file", str(tmp_path / "state.json"), "--log-dir", str(tmp_path / "launch"),
         "--detach"],
        capture_output=True, text=True, timeout=120, env=without_loopback_env(),
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    line = errors[0]
    assert f"cannot connect to Ray at {cluster.address}:" in line
    assert f"connects to {node}:{port}, which refused" in line
    assert "listens on loopback only" in line
    assert f"--node-ip-address {node}" in line and f"--address {node}:{port}" in line
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" in line
    assert "did not connect" not in line  # the TCP check refused, not the 30 s probe deadline
    assert not (tmp_path / "state.json").exists()
    print(f"\nloopback head, default --connect-timeout: exit 2 after {elapsed:.1f} s")


def test_probe_of_loopback_head_is_killed_at_the_deadline(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the TCP check, the bound itself: the probe's ``ray.init`` retries the node address
    where no GCS listens, and is killed at the deadline (nothing of it left running)."""
    from tailsieve.errors import ConfigError
    from tailsieve.runtime.cluster.connect import probe_cluster

    node = node_address()
    if node in ("127.0.0.1", "::1"):
        pytest.skip("this machine has no address but loopback: Ray keeps 127.0.0.1")
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    target = f"{node}:{cluster.address.rsplit(':', 1)[1]}"
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=rf"Ray did not connect to {target} within 8 s") as err:
        probe_cluster(cluster.address, target, time.monotonic() + 8.0, 8.0, tcp_open=False)
    elapsed = time.monotonic() - t0
    assert elapsed >= 8.0  # it waited for its bound; the message says the probe was ended there
    assert "Ray's last message: " in str(err.value)  # Ray's own GCS warning, said in the line
    left = subprocess.run(["pgrep", "-f", "ray.init\\(address=sys.argv"], capture_output=True)
    assert left.stdout == b"", "a probe process is still running"


def test_ray_launch_restart_readmit_exactly_once(
    cluster: Cluster, state_file: Path, tmp_path: Path
) -> None:
    t0 = time.monotonic()
    engines = f"emulated*4@{EMULATED_PORT}"
    extra: list[str] = []
    if HAS_VLLM:
        engines += f",vllm@{VLLM_PORT}"
        extra = ["--model", str(MODEL_DIR), "--python", str(VLLM_PYTHON), "--cores", "0,0,0,0,1"]
    else:
        print(f"\nno vLLM CPU server: {VLLM_PYTHON} or {MODEL_DIR} missing; emulated only")
    out = cli(
        "launch", "--ray", "--address", cluster.address, "--engines", engines,
        "--served-model-name", "tiny", "--resource", "tailsieve_replica",
        "--cpus-per-replica", "1", "--max-restarts", "2", "--placement", "spread",
        "--emulator-args", "--time-scale 10 --length-median 1000",
        "--state-file", str(state_file), "--log-dir", str(tmp_path / "launch"),
        "--health-timeout", "180", "--detach", *extra,
    )  # fmt: skip
    t_launch = time.monotonic() - t0
    first = json.loads(state_file.read_text())
    reps = first["replicas"]
    assert out.strip().split(",") == first["endpoints"]
    assert len({r["node_id"] for r in reps}) == 2, "replicas must be on both simulated nodes"
    assert all(r["host"] == "127.0.0.1" for r in reps)
    seen_pids = {int(r["pid"]) for r in reps}

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt_id": f"q{i}", "prompt": f"Q{i}: 1+{i}="}) + "\n"
                for i in range(400))
    )  # fmt: skip
    run_dir = tmp_path / "rollout"
    rollout = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tailsieve.cli.main import main; sys.exit(main())",
         "rollout", "--state", str(state_file), "--prompts", str(prompts), "--groups",
         str(GROUPS), "--group-size", str(GROUP_SIZE), "--steps", str(STEPS), "--policy",
         "tailsieve", "--profile", "cpu", "--model", "tiny", "--max-tokens", "48", "--seed", "0",
         "--request-timeout", "600", "--out", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        victim = reps[0]  # an emulated replica
        steps_file = run_dir / "steps.jsonl"
        wait_for(
            lambda: steps_file.exists() and steps_file.read_text().count("\n") >= 1,
            120, "the first step",
        )  # fmt: skip
        # killed while it runs >= 2 requests that have generated tokens: at once, the wasted
        # tokens can round to 0 (the requests were sent milliseconds before)
        made = metric(victim["endpoint"], "vllm:generation_tokens_total")
        wait_for(
            lambda: running(victim["endpoint"]) >= 2
            and metric(victim["endpoint"], "vllm:generation_tokens_total") >= made + 8,
            60, "the victim to decode",
        )  # fmt: skip
        os.killpg(int(victim["pid"]), signal.SIGKILL)
        # the rollout pauses until Ray has restarted the victim, however long that takes on a
        # loaded machine, so that steps are left to re-admit it (it resumes into the fault)
        rollout.send_signal(signal.SIGSTOP)
        killed_in_step = steps_file.read_text().count("\n")
        try:
            wait_for(
                lambda: restarted_healthy(state_file, victim),
                300,
                "Ray to restart the killed replica and the new one to answer /health",
            )
        finally:
            rollout.send_signal(signal.SIGCONT)
        _, stderr = rollout.communicate(timeout=240)
    finally:
        if rollout.poll() is None:
            rollout.kill()
    assert rollout.returncode == 0, stderr[-3000:]
    t_rollout = time.monotonic() - t0

    after = json.loads(state_file.read_text())
    moved = after["replicas"][0]
    assert moved["restarted"] and moved["pid"] != victim["pid"]
    assert moved["endpoint"] != victim["endpoint"]  # Ray restarted it at a new port
    assert moved["node_id"] == victim["node_id"]  # same bundle, same node
    seen_pids |= {int(r["pid"]) for r in after["replicas"]}

    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    # moves are on by default: the killed server's responses continue elsewhere from their
    # last seam (relocated; a group whose attempt had not begun is regenerated)
    assert summary["moves"] is True
    assert summary["num_regenerated"] + summary["num_relocated"] >= 1, "the killed server's work"
    assert summary["wasted_tokens"] > 0, "the lost pieces' tokens count as wasted"
    assert summary["num_readmitted"] >= 1, "the restarted replica was re-admitted"
    assert steps[-1]["num_planned_replicas"] == len(reps)

    delivered: Counter[str] = Counter()
    on_victim_after = 0
    for f in sorted((run_dir / "batches").glob("step_*.jsonl")):
        rows = [json.loads(line) for line in f.read_text().splitlines()]
        per_group = Counter(r["prompt_id"] for r in rows)
        assert set(per_group.values()) == {GROUP_SIZE}, f"{f.name}: incomplete group"
        delivered.update(per_group.keys())
        if int(f.stem.split("_")[1]) > killed_in_step:
            on_victim_after += sum(r["replica"] == 0 for r in rows)
    assert max(delivered.values()) == 1, "a prompt was delivered twice"
    assert set(delivered) == {f"q{i}" for i in range(len(delivered))}, "a drawn prompt was lost"
    assert sum(delivered.values()) == summary["num_delivered_groups"]
    assert on_victim_after > 0, "the re-admitted replica served groups again"

    cli("launch", "--stop", str(state_file), timeout_s=120)
    assert not state_file.exists()
    wait_for(lambda: not any(group_alive(p) for p in seen_pids), 30, "servers to exit")
    ray.init(address=cluster.address, namespace="tailsieve", log_to_driver=False)
    named = ray.util.list_named_actors(all_namespaces=True)
    assert not [a for a in named if a["name"].startswith("tailsieve-")], named
    print(
        f"\nlaunch {t_launch:.1f} s, launch+rollout {t_rollout:.1f} s, total "
        f"{time.monotonic() - t0:.1f} s; replicas {len(reps)} (vLLM: {HAS_VLLM}); steps "
        f"{len(steps)}, regenerated {summary['num_regenerated']} (wasted "
        f"{summary['wasted_tokens']} tokens, {summary['estimated_wasted_tokens']} estimated), "
        f"readmitted "
        f"{summary['num_readmitted']}, planned R per step {summary['planned_replicas']}"
    )


def test_pack_placement_fills_one_node(cluster: Cluster, state_file: Path, tmp_path: Path) -> None:
    cli(
        "launch", "--ray", "--address", cluster.address, "--engines", f"emulated*3@{EMULATED_PORT}",
        "--resource", "tailsieve_replica", "--placement", "pack", "--state-file", str(state_file),
        "--log-dir", str(tmp_path / "launch"), "--detach",
    )  # fmt: skip
    reps = json.loads(state_file.read_text())["replicas"]
    assert len(reps) == 3 and len({r["node_id"] for r in reps}) == 1
    pids = [int(r["pid"]) for r in reps]
    cli("launch", "--stop", str(state_file))
    wait_for(lambda: not any(group_alive(p) for p in pids), 30, "servers to exit")


def test_replica_out_of_restarts_is_marked_dead(
    cluster: Cluster, state_file: Path, tmp_path: Path
) -> None:
    """``--max-restarts 0``: the killed server's actor is not restarted; the supervisor marks
    its row dead (no live address or PID, a reason and a time); ``launch --stop`` still works."""
    cli(
        "launch", "--ray", "--address", cluster.address, "--engines", f"emulated*2@{EMULATED_PORT}",
        "--resource", "tailsieve_replica", "--max-restarts", "0", "--state-file", str(state_file),
        "--log-dir", str(tmp_path / "launch"), "--detach",
    )  # fmt: skip
    reps = json.loads(state_file.read_text())["replicas"]
    assert [r["status"] for r in reps] == ["alive", "alive"]
    victim = reps[1]
    os.killpg(int(victim["pid"]), signal.SIGKILL)
    t0 = time.monotonic()

    def marked() -> bool:
        return json.loads(state_file.read_text()).get("dead") == [1]

    wait_for(marked, 60, "the dead replica to be marked in the state file")
    print(f"\nmarked dead {time.monotonic() - t0:.1f} s after the kill")
    after = json.loads(state_file.read_text())
    dead = after["replicas"][1]
    assert dead["status"] == "dead" and dead["endpoint"] is None and dead["pid"] is None
    assert dead["last_pid"] == victim["pid"] and dead["last_endpoint"] == victim["endpoint"]
    assert (
        "out of restarts" in dead["reason"]
        and dead["dead_at"] >= after["replicas"][0]["started_at"]
    )
    assert after["replicas"][0]["status"] == "alive"
    assert after["endpoints"] == [reps[0]["endpoint"], victim["endpoint"]]
    pid0 = int(reps[0]["pid"])
    out = cli("launch", "--stop", str(state_file), timeout_s=120)
    assert str(pid0) in out
    assert not state_file.exists()
    wait_for(lambda: not group_alive(pid0), 30, "the live server to exit")
