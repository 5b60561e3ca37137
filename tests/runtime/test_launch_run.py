"""``runtime.launch_run``, what ``tailsieve launch`` runs once its options are read, called
directly with a fake vLLM module (no vLLM needed): serve a fleet and leave it up, stop it from
its state file, and a clear error for a state file that cannot be read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_launcher import cfg, fake_vllm  # noqa: F401  (fake_vllm: a pytest fixture)

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.launch_run import serve_local, stop_launched


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_serve_detached_then_stop_from_the_state_file(fake_vllm: Path) -> None:  # noqa: F811
    c = cfg(fake_vllm)
    said: list[tuple[str, bool]] = []
    endpoints = serve_local(c, detach=True, say=lambda line, err: said.append((line, err)))
    assert len(endpoints) == 2 and all(e.startswith("http://127.0.0.1:") for e in endpoints)
    assert said == [(",".join(endpoints), False), (f"state file: {c.state_path}", True)]
    state = json.loads(c.state_path.read_text())
    pids = [int(r["pid"]) for r in state["replicas"]]
    assert all(alive(p) for p in pids)  # detached: still serving
    assert stop_launched(c.state_path) == pids
    assert not c.state_path.exists()


def test_a_server_that_dies_at_start_stops_the_fleet(
    fake_vllm: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv("FAKE_VLLM_DIE", "1")
    c = cfg(fake_vllm)
    said: list[tuple[str, bool]] = []
    with pytest.raises(ReplicaError, match="boom while loading the model"):
        serve_local(c, detach=True, say=lambda line, err: said.append((line, err)))
    assert said == [] and not c.state_path.exists()


def test_stop_launched_names_a_state_file_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--stop .*missing.json: cannot read the state file"):
        stop_launched(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read the state file"):
        stop_launched(bad)
