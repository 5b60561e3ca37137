"""``tailsieve acceptance measure`` / ``list`` end to end through ``main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.drafts.trace_groups import seeded_recording

SERVER_KS = ["1", "2", "4", "8"] if seeded_recording("smollm2-math") else ["1", "2", "4"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list_names_every_source(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["acceptance", "list"], capsys)
    assert rc == 0
    for name in ("ngram", "suffix-running", "suffix-finished", "suffix-siblings", "seer-group",
                 "rhymerl-epoch"):
        assert name in out


def test_measure_writes_the_table_and_the_preset_file(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["acceptance", "measure", "--trace", "smollm2-math", "--max-prompts", "1",
                      "--max-spec-tokens", "4", "--out", str(tmp_path)], capsys)
    assert rc == 0 and "| suffix-running | 8 |" in out
    preset = json.loads((tmp_path / "acceptance-smollm2-math.json").read_text())
    assert preset["name"] == "smollm2-math" and preset["max_spec_tokens"] == 4
    # what the simulator reads: the server tree per k (up to k = 4 where each response has 3
    # independent siblings), every placement-free source once; lockstep replays stay out
    assert preset["placement"] == {"ngram": "none", "suffix-siblings": "server",
                                   "seer-group": "none", "rhymerl-epoch": "none"}
    for source, by_k in preset["sources"].items():
        assert list(by_k) == (SERVER_KS if source == "suffix-siblings" else ["1"])
        assert all(1.0 <= tau <= 5.0 for tau in by_k.values())
    full = json.loads((tmp_path / "acceptance.json").read_text())
    assert full["config"]["max_spec_tokens"] == 4
    assert set(full["results"]["ngram"]["1"]["by_position"]) == {"0-63", "64-255", "256-511",
                                                                 "512+"}
    assert (tmp_path / "acceptance.md").read_text().startswith("| source | k |")


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, match in (
        (["--source", "nope"], "unknown draft source"),
        (["--max-spec-tokens", "0"], "--max-spec-tokens"),
        (["--k", "0"], "k values"),
        (["--prompt-ids", str(tmp_path / "missing.json")], "no such file"),
        (["--trace", str(tmp_path / "none.jsonl")], "no such trace file"),
    ):
        rc, _, err = run(["acceptance", "measure", "--max-prompts", "1", *argv], capsys)
        assert rc == 2 and match in err and err.count("\n") == 1, (argv, err)
    lengths_only = tmp_path / "t.csv"
    lengths_only.write_text("prompt_id,sample,response_tokens\np0,0,5\n")
    rc, _, err = run(["acceptance", "measure", "--trace", str(lengths_only)], capsys)
    assert rc == 2 and "no token_ids column" in err
