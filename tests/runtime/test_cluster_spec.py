"""``launch --ray`` building blocks that need no Ray: engine groups, server commands, ports,
the state file as an address provider, the Ray config's validation and CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.errors import ConfigError
from tailsieve.runtime.cluster.fleet import RayLaunchConfig
from tailsieve.runtime.cluster.host import port_free
from tailsieve.runtime.cluster.spec import EngineGroup, build_specs
from tailsieve.runtime.cluster.state import StateFileAddresses, write_json_atomic
from tailsieve.runtime.launcher import LaunchConfig


def test_engine_groups_parse_counts_and_ports() -> None:
    groups = EngineGroup.parse_list("emulated*4@8310, vllm@8301, sglang*2", 8101)
    assert groups == (
        EngineGroup("emulated", 4, 8310),
        EngineGroup("vllm", 1, 8301),
        EngineGroup("sglang", 2, 8302),
    )
    assert EngineGroup.parse_list("vllm*3", 8101) == (EngineGroup("vllm", 3, 8101),)
    for bad in ("tgi*2", "vllm*x", "vllm*0", "", "vllm@70000"):
        with pytest.raises(ConfigError):
            EngineGroup.parse_list(bad, 8101)


def test_specs_pools_speculation_and_restart_ports(tmp_path: Path) -> None:
    launch = LaunchConfig(
        model="/m", replicas=4, tail_replicas=1, tail_spec="mtp:3", served_model_name="tiny",
        python="/venv/bin/python",
    )  # fmt: skip
    groups = EngineGroup.parse_list("emulated*2@8310,vllm*2@8301", 0)
    specs = build_specs(groups, launch, str(tmp_path), max_restarts=2)
    assert [s.pool for s in specs] == ["bulk", "bulk", "bulk", "tail"]
    assert specs[0].ports == (8310, 8312, 8314, 8316)  # restarts move to a new port
    assert specs[3].ports == (8302, 8304, 8306, 8308)
    argv, env = specs[3].command("10.0.0.7", 8304, str(tmp_path))
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "10.0.0.7" and "8304" in argv
    assert json.loads(argv[argv.index("--speculative-config") + 1])["method"] == "mtp"
    assert env["HF_HUB_OFFLINE"] == "1"
    argv, _ = specs[1].command("127.0.0.1", 8312, str(tmp_path))
    assert argv[1:3] == ["-m", "tailsieve.runtime.emulator"] and "tiny" in argv
    with pytest.raises(ConfigError, match="replicas"):
        build_specs(groups[:1], launch, str(tmp_path), max_restarts=2)


def test_emulated_tail_pool_runs_its_speculation(tmp_path: Path) -> None:
    launch = LaunchConfig(model="", replicas=2, tail_replicas=1, tail_spec="mtp:3")
    specs = build_specs((EngineGroup("emulated", 2, 8310),), launch, str(tmp_path), 0)
    assert "profile.json" in specs[1].files and not specs[0].files
    argv, _ = specs[1].command("127.0.0.1", 8311, str(tmp_path))
    assert argv[argv.index("--profile") + 1] == f"{tmp_path}/profile.json"


def test_sglang_command_maps_speculation(tmp_path: Path) -> None:
    launch = LaunchConfig(model="/m", replicas=1, bulk_spec="eagle:2,model=/drafter")
    (spec,) = build_specs((EngineGroup("sglang", 1, 8301),), launch, str(tmp_path), 0, 2)
    argv, _ = spec.command("10.0.0.1", 8301, str(tmp_path))
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE"
    assert argv[argv.index("--tp") + 1] == "2"


def test_ray_config_bundles_and_validation() -> None:
    launch = LaunchConfig(model="/m", replicas=2)
    groups = (EngineGroup("vllm", 2, 8301),)
    cpu = RayLaunchConfig(groups, launch, resource="tailsieve_replica", cpus_per_replica=2)
    assert cpu.bundle == {"CPU": 2.0, "tailsieve_replica": 1.0}
    gpu = RayLaunchConfig(groups, launch, gpus_per_replica=4)
    assert gpu.bundle == {"GPU": 4.0, "CPU": 1.0}
    with pytest.raises(ConfigError, match="spread or pack"):
        RayLaunchConfig(groups, launch, placement="scatter")
    with pytest.raises(ConfigError, match="--model"):
        RayLaunchConfig(groups, LaunchConfig(model="", replicas=2))
    with pytest.raises(ConfigError, match="disagree"):
        RayLaunchConfig(groups, LaunchConfig(model="/m", replicas=3))


def test_state_file_addresses_follow_rewrites(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    with pytest.raises(ConfigError, match="not found"):
        StateFileAddresses(path)
    write_json_atomic(path, {"endpoints": ["http://a:1", "http://b:2"]})
    addrs = StateFileAddresses(path)
    assert addrs() == ["http://a:1", "http://b:2"]
    write_json_atomic(path, {"endpoints": ["http://a:1", "http://c:3"], "note": "restarted"})
    assert addrs() == ["http://a:1", "http://c:3"]
    path.unlink()
    assert addrs() == ["http://a:1", "http://c:3"]  # stopped meanwhile: last known addresses
    assert not list(tmp_path.glob(".*.tmp"))


def test_port_free_sees_a_listener() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not port_free("127.0.0.1", s.getsockname()[1])


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--ray", "--engines", "emulated*2", "--address", "local",
                 "--detach"]) == 2  # fmt: skip
    assert "--detach needs a running Ray cluster" in capsys.readouterr().err
    assert main(["launch", "--ray", "--engines", "vllm*2"]) == 2
    assert "--model is required" in capsys.readouterr().err
    assert main(["launch", "--stop", str(tmp_path / "missing.json")]) == 2
    assert "cannot read the state file" in capsys.readouterr().err


def test_stop_when_the_cluster_is_gone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    state = tmp_path / "state.json"
    write_json_atomic(state, {
        "endpoints": [f"http://127.0.0.1:{dead}"],
        "replicas": [{"endpoint": f"http://127.0.0.1:{dead}", "host": "127.0.0.1", "pid": 1}],
        "ray": {"address": f"127.0.0.1:{dead}", "namespace": "tailsieve", "actors": ["a"],
                "supervisor": "s", "placement_group": "p"},
    })  # fmt: skip
    assert main(["launch", "--stop", str(state)]) == 0
    assert not state.exists() and "stopped pids" in capsys.readouterr().out
