"""``tailsieve rollout`` against emulator subprocesses and ``tailsieve launch`` with a fake vLLM."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.workload.presets import AIME_TRACE_IN_REPO

AIME = AIME_TRACE_IN_REPO
MODEL = "tailsieve-emulated"


@pytest.fixture(scope="module")
def fleet() -> object:
    f = EmulatorFleet.start(2, profile="cpu", time_scale=0.01, model_name=MODEL)
    try:
        yield f
    finally:
        f.close()


@pytest.mark.skipif(not AIME.exists(), reason="AIME trace not available")
def test_rollout_replay_writes_batches(fleet: EmulatorFleet, tmp_path: Path) -> None:
    out = tmp_path / "run"
    log = tmp_path / "steps.log"
    rc = main(
        [
            "rollout",
            "--endpoints",
            ",".join(fleet.urls),
            "--replay-trace",
            str(AIME),
            "--length-scale",
            "0.02",
            "--groups",
            "4",
            "--group-size",
            "8",
            "--steps",
            "3",
            "--policy",
            "tailsieve",
            "--model",
            MODEL,
            "--max-tokens",
            "1000",
            "--log-file",
            str(log),
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    steps = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps][:3] == [0, 1, 2]
    assert all(s["num_groups"] == 4 for s in steps if not s["is_flush"])
    assert len(log.read_text().splitlines()) == len(steps)
    rows = [json.loads(x) for x in (out / "batches" / "step_0001.jsonl").read_text().splitlines()]
    assert len(rows) == 32
    assert set(rows[0]) >= {"prompt_id", "sample", "text", "response_tokens", "finish_reason"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_delivered_groups"] == sum(s["num_groups"] for s in steps)
    ids = [
        r["prompt_id"]
        for f in (out / "batches").iterdir()
        for r in map(json.loads, f.read_text().splitlines())
        if r["sample"] == 0
    ]
    assert len(ids) == len(set(ids))


def test_rollout_with_prompt_file(fleet: EmulatorFleet, tmp_path: Path) -> None:
    pf = tmp_path / "prompts.jsonl"
    pf.write_text(
        "".join(
            json.dumps({"prompt_id": f"p{i}", "prompt": f"question {i}"}) + "\n" for i in range(20)
        )
    )
    out = tmp_path / "o"
    rc = main(
        [
            "rollout",
            "--endpoints",
            ",".join(fleet.urls),
            "--prompts",
            str(pf),
            "--groups",
            "3",
            "--group-size",
            "2",
            "--steps",
            "2",
            "--policy",
            "uniform",
            "--model",
            MODEL,
            "--max-tokens",
            "20",
            "--seed",
            "1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    assert json.loads((out / "summary.json").read_text())["num_delivered_groups"] == 6


def test_moves_off_is_said_once(fleet: EmulatorFleet, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str],
                                caplog: pytest.LogCaptureFixture) -> None:
    """Moves blocked (here by --no-continuation): the rollout's one warning says why; the CLI
    adds no second line of its own."""
    pf = tmp_path / "prompts.jsonl"
    pf.write_text("".join(json.dumps({"prompt_id": f"p{i}", "prompt": "q"}) + "\n"
                          for i in range(4)))
    rc = main(["rollout", "--endpoints", ",".join(fleet.urls), "--prompts", str(pf),
               "--groups", "2", "--group-size", "2", "--steps", "1", "--model", MODEL,
               "--max-tokens", "10", "--no-continuation", "--no-progress",
               "--out", str(tmp_path / "o")])
    assert rc == 0
    said = [r for r in caplog.records if "moves are off" in r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("WARNING", "TailSieve: moves are off: continuation=False")]
    assert "moves are off" not in capsys.readouterr().err


def test_rollout_needs_a_prompt_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rollout", "--endpoints", "http://127.0.0.1:9"]) == 2
    assert "--prompts" in capsys.readouterr().err


def test_launch_detach_then_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(
        textwrap.dedent("""
        import sys
        from aiohttp import web
        port = int(sys.argv[sys.argv.index("--port") + 1])
        app = web.Application()
        async def health(_):
            return web.Response(text="")
        app.router.add_get("/health", health)
        web.run_app(app, host="127.0.0.1", port=port, print=None)
    """)
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    state = tmp_path / "state.json"
    rc = main(
        [
            "launch",
            "--model",
            "/m",
            "--replicas",
            "1",
            "--base-port",
            "18731",
            "--python",
            sys.executable,
            "--cores",
            "0",
            "--log-dir",
            str(tmp_path / "logs"),
            "--state-file",
            str(state),
            "--detach",
        ]
    )
    assert rc == 0 and state.exists()
    pid = json.loads(state.read_text())["replicas"][0]["pid"]
    assert main(["launch", "--stop", str(state)]) == 0
    assert not state.exists()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def _replay_args(urls: list[str], out: Path, *extra: str) -> list[str]:
    return [
        "rollout", "--endpoints", ",".join(urls), "--replay-trace", "aime",
        "--length-scale", "0.01", "--max-tokens", "200", "--group-size", "2", "--steps", "2",
        "--out", str(out), *extra,
    ]


def test_rollout_without_model_uses_the_one_the_servers_serve(
    fleet: EmulatorFleet, tmp_path: Path
) -> None:
    """No --model: the name comes from GET /v1/models (a wrong name would be HTTP 404)."""
    out = tmp_path / "o"
    assert main(_replay_args(fleet.urls, out, "--groups", "2")) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_delivered_groups"] >= 4


def test_rollout_several_served_models_exits_2_listing_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = EmulatorFleet.start(
        2, profile="cpu", time_scale=0.01, model_name=MODEL,
        overrides=[{}, {"model_name": "other-model"}],
    )
    try:
        assert main(_replay_args(mixed.urls, tmp_path / "o", "--groups", "2")) == 2
    finally:
        mixed.close()
    err = capsys.readouterr().err
    assert err.startswith("error: ") and MODEL in err and "other-model" in err and "--model" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("policy", ["uniform", "tailsieve", "tailsieve-fixed"])
@pytest.mark.parametrize("num_replicas", [1, 2])
def test_rollout_defaults_never_reject_a_valid_run(
    fleet: EmulatorFleet, tmp_path: Path, policy: str, num_replicas: int
) -> None:
    """--groups 1 (and a single replica) with every policy's defaults: no q0/m0 errors."""
    out = tmp_path / "o"
    args = _replay_args(fleet.urls[:num_replicas], out, "--groups", "1", "--policy", policy)
    assert main(args) == 0
    steps = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
    assert all(s["num_groups"] == 1 for s in steps if not s["is_flush"])


def test_drain_priority_is_checked_on_every_server_before_the_first_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--drain-priority: an FCFS vLLM server (it answers a priority with HTTP 400) is named
    before any step runs or any output is written; servers with --scheduling-policy priority
    run the rollout."""
    mixed = EmulatorFleet.start(
        2, profile="cpu", time_scale=0.01, model_name=MODEL,
        overrides=[{}, {"scheduling_policy": "priority"}],
    )
    try:
        out = tmp_path / "o"
        assert main(_replay_args(mixed.urls, out, "--groups", "2", "--drain-priority")) == 2
        err = capsys.readouterr().err
        assert "--scheduling-policy priority" in err and mixed.urls[0] in err
        assert mixed.urls[1] not in err and not out.exists()
        assert main(_replay_args(mixed.urls[1:], out, "--groups", "2",
                                 "--drain-priority")) == 0
        assert json.loads((out / "summary.json").read_text())["num_delivered_groups"] >= 2
    finally:
        mixed.close()


@pytest.mark.parametrize("extra", [["--backend", "sglang"], ["--no-moves"]])
def test_drain_priority_without_vllm_moves_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    args = _replay_args(["http://127.0.0.1:9"], tmp_path / "o", "--drain-priority", *extra)
    assert main(args) == 2
    assert "--drain-priority" in capsys.readouterr().err
