"""``tailsieve record``: a recording against emulator subprocesses (real HTTP, chat dialect,
streamed), the prompt set command, and bad input (one ``error:`` line, exit 2, nothing
written)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.record.math_problems import SHIPPED_PROMPTS
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.workload.io import read_trace

MODEL = "tailsieve-emulated"
NOWHERE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def fleet() -> Iterator[EmulatorFleet]:
    f = EmulatorFleet.start(2, profile="cpu", time_scale=0.01, model_name=MODEL)
    try:
        yield f
    finally:
        f.close()


def test_record_run_writes_a_trace_the_tools_read(
    fleet: EmulatorFleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rec.jsonl.gz"
    rc = main(["record", "run", "--endpoints", ",".join(fleet.urls), "--prompts", "math",
               "--num-prompts", "6", "--group-size", "4", "--epochs", "2", "--max-tokens", "48",
               "--stream", "--stream-interval", "8", "--out", str(out)])  # fmt: skip
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["rows"] == 6 * 4 * 2 and summary["prompts"] == 6
    tr = read_trace(out)
    assert tr.num_rows == 48 and sorted(set(tr.step.tolist())) == [0, 1]
    assert tr.correct is not None and tr.token_ids is not None and tr.chunk_tokens is not None
    assert tr.prompt_tokens is not None and int(tr.prompt_tokens.min()) > 0
    assert sorted(set(tr.replica.tolist())) == [0, 1]  # type: ignore[union-attr]
    assert int(tr.response_tokens.max()) <= 48
    info = json.loads((tmp_path / "rec.jsonl.gz.info.json").read_text())
    assert info["served_model"] == MODEL and info["config"]["backend"] == "vllm-chat"
    assert info["server_versions"] == ["tailsieve-emulator"] * 2
    # the trace tools read it: stats (two steps: cross-step AUC) and the simulator
    assert main(["trace", "stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["num_steps"] == 2 and "tail_auc" in stats
    assert main(["simulate", "--workload", str(out), "--replicas", "2", "--groups", "3",
                 "--group-size", "4", "--steps", "3", "--policy", "uniform-requests",
                 "--json"]) == 0  # fmt: skip


def test_record_prompts_reproduces_the_shipped_set(tmp_path: Path) -> None:
    out = tmp_path / "p.jsonl"
    assert main(["record", "prompts", "--out", str(out)]) == 0
    assert out.read_bytes() == SHIPPED_PROMPTS.read_bytes()
    assert main(["record", "prompts", "--out", str(out), "--seed", "5", "--per-level", "2"]) == 0
    assert len(out.read_text().splitlines()) == 10


BAD: list[tuple[list[str], str]] = [
    (["--out", "t.txt"], "--out t.txt: use a trace suffix"),
    (["--out", "adir"], "use a trace suffix"),
    (["--out", "nodir/t.jsonl"], "--out nodir/t.jsonl: no such folder"),
    (["--out", "t.jsonl", "--temperature", "-1"], "temperature must be in [0, 10]"),
    (["--out", "t.jsonl", "--top-p", "1.5"], "top_p must be in (0, 1]"),
    (["--out", "t.jsonl", "--max-tokens", "0"], "max_tokens must be >= 1"),
    (["--out", "t.jsonl", "--seed", "-3"], "seed must be in"),
    (["--out", "t.jsonl", "--stream-interval", "4"], "needs stream=True"),
    (["--out", "t.jsonl", "--prompts", "nope.jsonl"], "nope.jsonl: no such prompt file"),
    (["--out", "t.jsonl", "--prompts", "bad.jsonl"], "bad.jsonl:2: malformed JSON"),
    (["--out", "t.jsonl", "--num-prompts", "999"], "--num-prompts 999 outside 1..320"),
    (["--out", "t.jsonl", "--num-prompts", "4", "--groups-per-step", "3"],
     "groups_per_step 3 must divide the 4 prompts"),
    (["--out", "t.jsonl", "--num-prompts", "2"], "no replica answers /health"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_input_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    args: list[str], message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "bad.jsonl").write_text('{"prompt_id": "a", "prompt": "x"}\n{oops\n')
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(["record", "run", "--endpoints", NOWHERE, *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: ") and message in err, err
    assert "\n" not in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    rc = main(["record", "run", "--endpoints", "127.0.0.1:8000", "--out", "t.jsonl"])
    assert rc == 2 and "is not an http(s):// URL" in capsys.readouterr().err
