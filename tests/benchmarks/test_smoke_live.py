"""Smoke runs of the live benchmark scripts: ``bench_router.py`` and ``bench_real_engine.py`` on
emulated replicas (always), and ``bench_real_engine.py`` and ``bench_seam.py`` on the real vLLM
CPU servers when ``TAILSIEVE_VLLM_ENDPOINTS`` names them. Tiny shapes, seconds each, everything in ``tmp_path``.
The real-engine run goes through ``TailSieveRollout`` exactly as the full benchmark does, so a
wrapper around ``executor.run`` that drops an argument fails here."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest
from smoke_helpers import repo_unchanged

ENDPOINTS = os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", "")
POLICIES = ("uniform", "uniform-requests", "tailsieve")
TINY = ["--groups", "2", "--group-size", "2", "--batch-sizes", "1,2", "--profile-repeats", "1",
        "--ttft-repeats", "2"]


def run_real_engine(out: Path, servers: list[str], steps: int, tokens: int,
                    lanes: tuple[str, ...] = POLICIES) -> dict[str, Any]:
    argv = [*servers, *TINY, "--steps", str(steps), "--profile-tokens", str(tokens),
            "--max-response-tokens", str(tokens), "--out", str(out)]
    for p in lanes:
        argv += ["--policy", p]
    with repo_unchanged():
        assert importlib.import_module("bench_real_engine").main(argv) == 0
    res: dict[str, Any] = json.loads((out / "real_engine.json").read_text())
    return res


def check_result(res: dict[str, Any], out: Path, steps: int,
                 lanes: tuple[str, ...] = POLICIES) -> None:
    assert list(res["policies"]) == list(lanes)
    judged = res["judged_variant"]
    assert judged == "profile_bracket"
    for pol, d in res["policies"].items():
        regular = [r for r in d["steps"] if not r["is_flush"]]
        assert len(regular) == steps, pol
        assert [r["round"] for r in regular] == list(range(steps))
        assert d["live_mean_step_s"] > 0 and d["sim_mean_step_s"][judged] > 0
        for r in d["steps"]:  # the per-step error table: live vs simulated, every step
            for variant in ("profile", "profile_after", judged):
                assert r["sim_makespan_s"][variant] > 0
            # the file rounds times to 0.1 ms: allow for that on emulated steps of ~50 ms
            live, sim = r["live_makespan_s"], r["sim_makespan_s"][judged]
            assert r["rel_err"][judged] == pytest.approx(
                sim / live - 1, abs=1e-3 + 1e-4 * (1 + sim / live) / live)
    if {"uniform", "uniform-requests"} <= set(lanes):
        # uniform keeps each group on one replica, uniform-requests deals its responses
        uni = res["policies"]["uniform"]["steps"][0]["plan"]["assignments"]
        req = res["policies"]["uniform-requests"]["steps"][0]["plan"]["assignments"]
        assert all(len(set(a["replicas"])) == 1 for a in uni)
        assert all(len(set(a["replicas"])) == 2 for a in req)
    # one profile for every prediction, a second for the drift figure
    assert set(res["profiles"]) >= {"before", "after"}
    assert res["drift"] == pytest.approx(
        max(abs(d["drift_rel"]) for d in res["policies"].values()))
    assert len(res["ordering"]) == len(lanes) * (len(lanes) - 1) // 2
    assert isinstance(res["ordering_ok"], bool) and "live_noise" in res
    pair = {tuple(o["pair"]): o for o in res["ordering"]}
    if ("uniform", "uniform-requests") in pair:
        assert not pair["uniform", "uniform-requests"]["identical_plans"]
    for o in res["ordering"]:  # identical plans: the simulator predicts a tie, not an order
        assert (o["same_order"] is None) == o["identical_plans"]
        if o["identical_plans"]:
            assert o["sim_diff_rel"] == pytest.approx(0.0, abs=1e-4)
    # interleaved: step t of every policy ran before step t + 1 of any
    order = {(p, r["step"]): r["run_order"] for p, d in res["policies"].items()
             for r in d["steps"] if not r["is_flush"]}
    for t in range(steps - 1):
        assert max(order[p, t] for p in lanes) < min(order[p, t + 1] for p in lanes)
    md = (out / "real_engine.md").read_text()
    assert "| policy | live mean step | simulated | error |" in md
    assert "Profiling drift" in md and f"| {lanes[-1]} | 0 |" in md
    assert (out / "profile_mean_before.json").is_file()


def test_bench_real_engine_emulated(tmp_path: Path) -> None:
    res = run_real_engine(tmp_path, ["--endpoints", "", "--emulate", "2",
                                     "--emulate-time-scale", "0.5"], steps=2, tokens=40)
    assert res["servers"] == "emulated"
    check_result(res, tmp_path, steps=2)


def test_bench_real_engine_moves_and_profiles_between(tmp_path: Path) -> None:
    """A ``tailsieve+moves`` lane (continuation + the live rebalancer) beside ``tailsieve``, and
    profiles between rounds: each round is predicted from the two profiles around it."""
    lanes = ("tailsieve", "tailsieve+moves")
    res = run_real_engine(tmp_path, ["--endpoints", "", "--emulate", "2",
                                     "--emulate-time-scale", "0.5", "--profile-between",
                                     "--piece-tokens", "8"], steps=2, tokens=40, lanes=lanes)
    check_result(res, tmp_path, steps=2, lanes=lanes)
    assert res["profile_times"] == 3 and len(res["profiles"]["between"]) == 1
    moved, plain = (res["policies"][x]["steps"] for x in ("tailsieve+moves", "tailsieve"))
    assert all(r["plan"]["balance"] for r in moved)
    assert not any(r["plan"]["balance"] or r["live_moves"] or r["sim_moves"] for r in plain)
    pair = {tuple(o["pair"]): o for o in res["ordering"]}
    assert not pair["tailsieve", "tailsieve+moves"]["identical_plans"]
    # the judged prediction of a round is the mean of the profiles around it: with a profile
    # between the two rounds, they differ from the first-profile-only prediction
    assert "between rounds 0" in (tmp_path / "real_engine.md").read_text()


@pytest.mark.vllm
@pytest.mark.skipif(not ENDPOINTS, reason="TAILSIEVE_VLLM_ENDPOINTS not set (no vLLM servers)")
def test_bench_real_engine_vllm(tmp_path: Path) -> None:
    res = run_real_engine(tmp_path, ["--endpoints", ENDPOINTS], steps=1, tokens=20)
    assert res["servers"] == "running servers (--endpoints)"
    check_result(res, tmp_path, steps=1)


@pytest.mark.parametrize("hosted", [False, True], ids=["fleet", "hosted"])
def test_bench_router(hosted: bool, tmp_path: Path) -> None:
    """One replica per subprocess (the default) and replicas hosted in one process (the
    ``--cluster`` path), on free ports; the router's event loop is reported (auto: uvloop when
    installed)."""
    out = tmp_path / "router.json"
    argv = ["--replicas", "2", "--groups", "4", "--group-size", "2", "--steps", "1",
            "--time-scale", "0.01", "--profile", "cpu", "--out", str(out)]
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    if hosted:
        argv += ["--hosts", "1", "--base-port", "0", "--loop", "asyncio"]
        loop = "asyncio"
    with repo_unchanged():
        importlib.import_module("bench_router").main(argv)
    data = json.loads(out.read_text())
    assert [r["step"] for r in data["steps"]] == [0, 1]
    assert data["event_loop"] == loop
    assert all(r["num_requests"] >= 8 and r["router_cpu_s"] > 0 for r in data["steps"])
    assert not (tmp_path / "router.profile.json").exists()


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_bench_router_with_moves(backend: str, tmp_path: Path) -> None:
    """``--rebalance`` runs continuation with the live rebalancer and reports moves, pieces
    and the checks' CPU per step (vLLM: pieces of 64; SGLang: no pieces, a move aborts);
    without continuation it is refused."""
    out = tmp_path / "router.json"
    pieces = ["--piece-tokens", "64"] if backend == "vllm" else []
    argv = ["--replicas", "2", "--groups", "4", "--group-size", "2", "--steps", "1",
            "--time-scale", "0.01", "--profile", "cpu", "--hosts", "1", "--base-port", "0",
            "--backend", backend, "--continuation", *pieces, "--rebalance", "--seam-s", "0.001",
            "--out", str(out)]  # fmt: skip
    with repo_unchanged():
        importlib.import_module("bench_router").main(argv)
    data = json.loads(out.read_text())
    assert data["rebalance"] and data["continuation"] and data["backend"] == backend
    assert data["piece_tokens"] == (64 if backend == "vllm" else None)
    assert "moves_per_step_after_warmup" in data
    assert sum(r["num_checks"] for r in data["steps"]) >= 1
    for r in data["steps"]:
        assert r["num_pieces"] >= 8 and r["num_moves"] >= 0
        assert (r["rebalancer_cpu_s"] > 0) == (r["num_checks"] > 0)  # the checks are timed
        if r["num_checks"]:  # per decision and per check, how long the event loop was held
            total_ms = 1e3 * r["rebalancer_cpu_s"] + 1e-9
            assert 0 < r["loads_cpu_ms_p50"] <= r["loads_cpu_ms_p99"] <= total_ms
            assert 0 <= r["decision_cpu_ms_p50"] <= r["decision_cpu_ms_p99"]
            assert r["decision_cpu_ms_p99"] <= r["decision_cpu_ms_max"] <= total_ms
            assert 0 < r["check_cpu_ms_p50"] <= r["check_cpu_ms_p99"] <= total_ms
        assert 0 <= r["router_sys_cpu_s"] <= r["router_cpu_s"] + 0.05
    with pytest.raises(SystemExit):
        importlib.import_module("bench_router").main(["--rebalance", "--out", str(out)])


def test_bench_real_engine_accepts_every_live_policy() -> None:
    from tailsieve.control.factory import ControllerName

    names = [c.value for c in ControllerName]
    assert "uniform-requests" in names
    argv = [a for name in names for a in ("--policy", name)]
    args = importlib.import_module("bench_real_engine").parse_args([*argv, "--q0", "1",
                                                                    "--m0", "1"])
    assert args.policy == names and (args.q0, args.m0) == (1, 1)


@pytest.mark.skipif(not ENDPOINTS, reason="TAILSIEVE_VLLM_ENDPOINTS not set (no vLLM servers)")
def test_bench_seam_vllm(tmp_path: Path) -> None:
    """The seam benchmark on the two vLLM servers: a continued token equals the one-go token
    (asserted inside the script) and the seam figures are written."""
    out = tmp_path / "seam.json"
    with repo_unchanged():
        importlib.import_module("bench_seam").main(
            ["--urls", ENDPOINTS, "--tokens", "4", "--repeats", "1", "--out", str(out)])
    res = json.loads(out.read_text())
    assert res["tokens_per_piece"] == 4 and len(res["rows"]) == 1
    assert res["median_s_per_token"] > 0


def test_bench_live_moves_emulated(tmp_path: Path) -> None:
    argv = ["--emulate", "2", "--emulate-time-scale", "0.3", "--groups", "3", "--group-size",
            "2", "--steps", "1", "--max-response-tokens", "80", "--piece-tokens", "16",
            "--batch-sizes", "1,2", "--profile-tokens", "20", "--out", str(tmp_path)]
    with repo_unchanged():
        assert importlib.import_module("bench_live_moves").main(argv) == 0
    res = json.loads((tmp_path / "live_moves.json").read_text())
    assert res["balance_steps"] >= 1
    for r in res["steps_detail"]:
        assert r["live_moves"] <= r["live_moves_asked"]
        if r["balance"]:  # both traces recorded (a step this small may end before a check)
            assert {"live", "sim", "effective_ratio", "partings_by_kind",
                    "first_move_parting"} <= set(r["checks"])
            assert r["checks"]["live"]["effective"] == r["live_moves"]
    assert "ratio live/sim" in (tmp_path / "live_moves.md").read_text()


def test_bench_auto_profile_emulated(tmp_path: Path) -> None:
    argv = ["--emulate", "2", "--emulate-time-scale", "0.3", "--groups", "2", "--group-size",
            "2", "--steps", "2", "--max-response-tokens", "60", "--batch-sizes", "1,2",
            "--profile-tokens", "20", "--profile-after", "--out", str(tmp_path)]
    with repo_unchanged():
        assert importlib.import_module("bench_auto_profile").main(argv) == 0
    res = json.loads((tmp_path / "auto_profile.json").read_text())
    assert [r["label"] for r in res["steps_detail"]] == ["probe", "step 0", "step 1"]
    assert set(res["references"]) == {"profile", "truth"}
    last = res["steps_detail"][-1]
    assert last["pieces"] > res["steps_detail"][0]["pieces"]
    for ref in ("profile", "truth"):
        assert last["errors"][ref]["err_grid"]["max"] >= 0
    assert res["profile_before_vs_after"]["err_grid"]["max"] >= 0
    assert "err_ran vs truth" in (tmp_path / "auto_profile.md").read_text()


def test_bench_real_engine_natural_emulated(tmp_path: Path) -> None:
    """``--natural``: chat prompts, no forced lengths; the simulator replays each lane's own
    produced lengths."""
    argv = ["--natural", "--endpoints", "", "--emulate", "2", "--emulate-time-scale", "0.2",
            *TINY, "--steps", "1", "--max-tokens", "60", "--profile-tokens", "20",
            "--policy", "uniform", "--policy", "tailsieve+moves", "--out", str(tmp_path)]
    with repo_unchanged():
        assert importlib.import_module("bench_real_engine").main(argv) == 0
    res = json.loads((tmp_path / "real_engine.json").read_text())
    assert res["natural"] is True and list(res["policies"]) == ["uniform", "tailsieve+moves"]
    for d in res["policies"].values():
        assert d["natural_lengths"]["responses"] >= 4
        assert 0 < d["natural_lengths"]["max"] <= 60
    assert "natural lengths" in (tmp_path / "real_engine.md").read_text()


def test_bench_agentic_live_emulated(tmp_path: Path) -> None:
    """The agentic real-engine benchmark's code path on two emulated replicas: profile, live
    steps of two policies with the scripted tool, exact prompts checked, the simulator on the
    recorded turns."""
    argv = ["--emulate", "2", "--groups", "2", "--group-size", "2", "--steps", "2",
            "--max-turns", "3", "--max-tokens", "24", "--batch-sizes", "1,2",
            "--profile-tokens", "20", "--repeats", "1", "--prefill-tokens", "200",
            "--tool-s", "0.01", "--out", str(tmp_path)]
    with repo_unchanged():
        assert importlib.import_module("bench_agentic_live").main(argv) == 0
    res = json.loads((tmp_path / "agentic_live.json").read_text())
    assert list(res["policies"]) == ["verl-sticky", "tailsieve"]
    assert res["pieces_checked"] > 0 and res["echo_mismatches"] == []
    assert res["context_mismatches"] == 0
    for d in res["policies"].values():
        assert [r["step"] for r in d["steps"]] == [0, 1]
        for r in d["steps"]:
            assert r["live_step_s"] > 0 and r["sim_step_s"] > 0
            assert r["num_turns"] == sum(r["turns_per_trajectory"])
            assert sorted(set(r["turns_per_trajectory"])) == [1, 2]  # k of q0, q1
    assert (tmp_path / "turns_tailsieve.jsonl").is_file()
    assert "| policy | step | live s |" in (tmp_path / "agentic_live.md").read_text()


def test_bench_agentic_emulated(tmp_path: Path) -> None:
    """A preset replayed on emulated replicas under two policies, against the simulator."""
    argv = ["--groups", "2", "--group-size", "2", "--steps", "2", "--replicas", "2",
            "--time-scale", "0.005", "--policies", "verl-sticky,tailsieve", "--out",
            str(tmp_path)]
    with repo_unchanged():
        assert importlib.import_module("bench_agentic_emulated").main(argv) == 0
    res = json.loads((tmp_path / "agentic_emulated.json").read_text())
    assert list(res["policies"]) == ["verl-sticky", "tailsieve"]
    assert res["policies"]["verl-sticky"]["live_speedup"] == pytest.approx(1.0)
    for d in res["policies"].values():
        assert len(d["steps"]) == 2 and d["live_mean_step_s"] > 0 and d["sim_mean_step_s"] > 0
        assert 0 <= d["live_hit_rate"] <= 1


def test_bench_agentic_emulated_kv(tmp_path: Path) -> None:
    """A KV budget for every replica (a profile copy), TailSieve with and without admission."""
    argv = ["--groups", "2", "--group-size", "2", "--steps", "2", "--replicas", "2",
            "--time-scale", "0.005", "--kv-tokens", "30000", "--policies",
            "tailsieve,tailsieve-nokv", "--out", str(tmp_path)]
    with repo_unchanged():
        assert importlib.import_module("bench_agentic_emulated").main(argv) == 0
    res = json.loads((tmp_path / "agentic_emulated.json").read_text())
    assert res["baseline"] == "tailsieve" and res["profile"].endswith("-kv30000.json")
    assert json.loads(Path(res["profile"]).read_text())["kv_capacity_tokens"] == 30000
    for d in res["policies"].values():
        assert d["preemptions"] >= 0 and d["waited"] >= 0
        assert all(r["cpu_share"] > 0.0 for r in d["steps"])
    # the gateway that may admit reads both engines' KV; with admission off it reads none
    assert [r["kv_readings"] for r in res["policies"]["tailsieve"]["steps"]] == [2, 2]
    assert [r["kv_readings"] for r in res["policies"]["tailsieve-nokv"]["steps"]] == [0, 0]


def test_bench_straggler(tmp_path: Path) -> None:
    """One replica of three slowed 4x: simulated and live on emulated replicas."""
    with repo_unchanged():
        assert importlib.import_module("bench_straggler").main(
            ["--smoke", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "straggler.json").read_text())
    (sim,), live = res["simulated"], res["live"]
    assert sim["slowdowns"] == [1.0, 1.0, 4.0] and live["slowdowns"] == [1.0, 1.0, 4.0]
    assert set(sim["policies"]) == {"verl-sticky", "affinity-margin", "tailsieve",
                                    "tailsieve-shared-curve"}
    assert live["fit"] and list(live["policies"]) == ["verl-sticky", "affinity-margin",
                                                      "tailsieve"]
    assert "| tailsieve-shared-curve |" in (tmp_path / "straggler.md").read_text()
    assert [r["moves"] for r in res["proxy"]["runs"]] == [True, False]
    assert all(sum(r["turns_per_replica"]) == 3 for r in res["proxy"]["runs"])
