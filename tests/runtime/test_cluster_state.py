"""The launch state file marks a replica out of restarts as dead; its readers (the router's
address provider, ``launch --stop``) handle such a row."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tailsieve.runtime.cluster import supervisor as sup_mod
from tailsieve.runtime.cluster.state import (
    StateFileAddresses,
    dead_row,
    endpoints_of,
    set_replicas,
    write_json_atomic,
)
from tailsieve.runtime.cluster.stop import stop_from_ray_state
from tailsieve.runtime.cluster.supervisor import Supervisor


def row(i: int, port: int, pid: int = 4242) -> dict[str, Any]:
    return {
        "index": i, "engine": "emulated", "pool": "bulk", "spec": "none", "status": "alive",
        "endpoint": f"http://127.0.0.1:{port}", "host": "127.0.0.1", "port": port, "pid": pid,
        "node_id": "n" * 16, "restarted": False, "log_file": "x.log", "started_at": 1.0,
    }  # fmt: skip


def state_with(rows: list[dict[str, Any]]) -> dict[str, Any]:
    st: dict[str, Any] = {
        "ray": {
            "address": "127.0.0.1:1", "namespace": "tailsieve", "placement_group": "pg",
            "actors": [f"a{r['index']}" for r in rows], "supervisor": "sup",
        }
    }  # fmt: skip
    set_replicas(st, rows)
    return st


def test_dead_row_keeps_no_live_address_or_pid() -> None:
    r = dead_row(row(1, 8311, pid=99), "out of restarts after 2 restarts: died", at_s=123.5)
    assert r["status"] == "dead" and r["endpoint"] is None and r["pid"] is None
    assert r["last_endpoint"] == "http://127.0.0.1:8311" and r["last_pid"] == 99
    assert r["reason"].startswith("out of restarts") and r["dead_at"] == 123.5
    assert dead_row(r, "again", at_s=999.0) == r  # marking twice changes nothing
    st = state_with([row(0, 8310), r])
    assert st["endpoints"] == ["http://127.0.0.1:8310", "http://127.0.0.1:8311"]
    assert st["dead"] == [1]
    assert endpoints_of(st["replicas"]) == st["endpoints"]


class _Died(Exception):
    pass


class _Unavailable(Exception):
    pass


class FakeRay:
    """``wait``/``get`` over refs that hold a row or an exception."""

    exceptions = SimpleNamespace(ActorDiedError=_Died)

    def wait(self, refs: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list]:
        return list(refs), []

    def get(self, ref: Any) -> Any:
        if isinstance(ref, BaseException):
            raise ref
        return ref


class FakeHandle:
    def __init__(self, answer: Any) -> None:
        self.info = SimpleNamespace(remote=lambda: answer)


def supervisor(state: dict[str, Any]) -> Supervisor:
    sup = Supervisor.__new__(Supervisor)  # no polling thread: ``poll`` is called by hand
    sup.state, sup.path, sup.interval_s, sup.num_writes = state, "unused", 0.01, 0
    return sup


def test_supervisor_marks_out_of_restarts_dead_and_keeps_restarting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = [row(0, 8310), row(1, 8311), row(2, 8312)]
    sup = supervisor(state_with(rows))
    moved = {**row(0, 8313, pid=777), "restarted": True}
    table = {"h1": {"State": "DEAD", "NumRestarts": 2}, "h2": {"State": "RESTARTING"}}
    monkeypatch.setattr(sup_mod, "_actor_state", lambda h: table[h.key])
    handles = [FakeHandle(moved), FakeHandle(_Died("The actor died: exit 75")),
               FakeHandle(_Died("restarting"))]  # fmt: skip
    for k, h in enumerate(handles):
        h.key = f"h{k}"  # type: ignore[attr-defined]
    assert sup.poll(FakeRay(), handles)
    got = sup.state["replicas"]
    assert got[0] == moved  # a restarted server: its new address
    assert got[1]["status"] == "dead" and got[1]["pid"] is None
    assert got[1]["reason"] == "out of restarts after 2 restarts: The actor died: exit 75"
    assert got[2] == rows[2]  # restarting: the last row stays until it answers
    assert sup.state["endpoints"][1] == "http://127.0.0.1:8311"
    assert sup.state["dead"] == [1]
    assert not sup.poll(FakeRay(), handles)  # nothing new: no rewrite; dead ones not asked


def test_supervisor_ignores_temporarily_unavailable_actor() -> None:
    sup = supervisor(state_with([row(0, 8310)]))
    assert not sup.poll(FakeRay(), [FakeHandle(_Unavailable("unavailable"))])
    assert sup.state["replicas"][0]["status"] == "alive"


def test_router_address_provider_reports_dead(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    st = state_with([row(0, 8310), row(1, 8311)])
    write_json_atomic(path, st)
    addrs = StateFileAddresses(path)
    assert addrs() == ["http://127.0.0.1:8310", "http://127.0.0.1:8311"] and addrs.dead == {}
    set_replicas(st, [st["replicas"][0], dead_row(st["replicas"][1], "out of restarts")])
    st["updated_at"] = 2.0  # a different size: the provider re-reads
    write_json_atomic(path, st)
    assert addrs() == ["http://127.0.0.1:8310", "http://127.0.0.1:8311"]  # indices stable
    assert addrs.dead == {1: "out of restarts"}


def test_stop_skips_dead_rows(tmp_path: Path) -> None:
    """``launch --stop`` on a state file with a dead replica, the cluster gone: no crash on the
    null PID, the state file removed."""
    path = tmp_path / "state.json"
    port = 1  # nothing answers there
    st = state_with([dead_row(row(0, port, pid=2**22 + 7), "out of restarts")])
    path.write_text(json.dumps(st))
    assert stop_from_ray_state(path) == []
    assert not path.exists()
