"""``tailsieve trace agentic`` and ``tailsieve trace turns``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.workload.agentic_presets import agentic_preset
from tailsieve.workload.turn_io import read_turn_trace

META = ("out", "preset", "seed", "models", "calibrated_to")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_agentic_writes_the_preset_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.csv"
    rc, text, err = run(["trace", "agentic", "--preset", "search-agent", "--groups", "6",
                         "--group-size", "4", "--steps", "2", "--seed", "3", "--out", str(out),
                         "--json"], capsys)
    assert rc == 0, err
    summary = json.loads(text)
    tt = read_turn_trace(out)
    assert tt == agentic_preset("search-agent").generate(6, 4, 2, 3)
    assert summary["num_trajectories"] == 48 and summary["num_steps"] == 2
    assert summary["num_turns"] == sum(t.num_turns for t in tt.trajectories)
    rc, text, err = run(["trace", "turns", str(out), "--json"], capsys)
    assert rc == 0, err
    again = json.loads(text)
    assert {k: again[k] for k in summary if k not in META} == {
        k: v for k, v in summary.items() if k not in META}
    assert "Search-R1" in summary["calibrated_to"]


def test_agentic_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.jsonl"
    rc, text, err = run(["trace", "agentic", "--preset", "math-code-agent", "--groups", "8",
                         "--out", str(out), "--max-context", "3000", "--group-correlation",
                         "0", "--json"], capsys)
    assert rc == 0, err
    assert json.loads(text)["context_max"] <= 3000
    assert read_turn_trace(out) == agentic_preset("math-code-agent").generate(
        8, 8, 1, 0, group_correlation=0.0, max_context_tokens=3000)


def test_turns_reads_single_turn_traces(capsys: pytest.CaptureFixture[str]) -> None:
    rc, text, err = run(["trace", "turns", "aime", "--json", "--prompt-tokens", "120"], capsys)
    assert rc == 0, err
    s = json.loads(text)
    assert s["num_trajectories"] == 4768 and s["turns_max"] == 1 and s["num_tool_calls"] == 0
    assert s["prompt_tokens_p50"] == 120 and s["group_share_log_turns"] is None
    rc, text, _ = run(["trace", "turns", "aime"], capsys)
    assert rc == 0 and "turns_p50" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["trace", "agentic", "--preset", "chat", "--out", "{out}"], "unknown agentic preset"),
        (["trace", "agentic", "--preset", "swe-agent", "--groups", "0", "--out", "{out}"],
         "num_groups must be"),
        (["trace", "agentic", "--preset", "swe-agent", "--group-correlation", "2", "--out",
          "{out}"], "group_correlation"),
        (["trace", "agentic", "--preset", "swe-agent", "--out", "{tmp}/x.txt"],
         "unknown trace format"),
        (["trace", "turns", "{tmp}/missing.jsonl"], "no such trace file"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               argv: list[str], message: str) -> None:
    args = [a.format(out=tmp_path / "o.jsonl", tmp=tmp_path) for a in argv]
    rc, _, err = run(args, capsys)
    assert rc == 2 and message in err and err.startswith("error: ")
    assert len(err.strip().splitlines()) == 1
