"""``workload.capture_run``, what ``tailsieve trace capture`` computes once its options are read,
called directly: the source's workload and step pairs, one result per rho, and the JSON the
command prints."""

from __future__ import annotations

import json

import pytest

from tailsieve.cli.main import main
from tailsieve.errors import TraceError
from tailsieve.model.profiles import load_profile
from tailsieve.workload.capture import CaptureConfig
from tailsieve.workload.capture_run import SPLIT_HALVES, capture_source, run_capture
from tailsieve.workload.workload_model import ResampleWorkload

MODEL = load_profile("qwen3-4b-h100")


def test_a_preset_regenerates_the_next_step_and_gives_one_result_per_rho() -> None:
    cfg = CaptureConfig(rhos=(0.1, 0.25), groups=16, group_size=4, replicas=4, rounds=6)
    run = run_capture("paper-math", MODEL, cfg, num_prompts=200)
    assert [r.rho for r in run.results] == [0.1, 0.25]
    assert run.method == "synthetic preset: next step regenerated"
    assert run.config.step_pairs == tuple((k, k + 1) for k in range(6))
    for r in run.results:
        assert r.launched_groups == 16 + round(r.rho * 16)
        assert 0.0 <= r.same_round_capture <= 1.0 and 0.0 <= r.cross_step_capture <= 1.0
    d = run.to_dict()
    assert d["source"] == "paper-math" and d["profile"] == MODEL.name
    assert [x["rho"] for x in d["results"]] == [0.1, 0.25]
    assert d["rounds"] == 6 and d["cross_step_method"] == run.method


def test_a_single_checkpoint_trace_is_split_in_halves() -> None:
    wl, pairs, method = capture_source("aime", 100, seed=0, rounds=5)
    assert isinstance(wl, ResampleWorkload) and pairs == ((0, 1),) and method == SPLIT_HALVES


def test_an_unknown_source_is_named() -> None:
    with pytest.raises(TraceError, match=r"nope\.jsonl: no such trace file"):
        run_capture("nope.jsonl", MODEL, CaptureConfig(rounds=1))


def test_the_command_prints_the_library_result(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "capture", "paper-math", "--rounds", "4", "--groups", "16",
                 "--replicas", "4", "--prompts", "200", "--json", "--rho", "0.1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    cfg = CaptureConfig(rhos=(0.1,), groups=16, replicas=4, rounds=4)
    assert printed == run_capture("paper-math", MODEL, cfg, num_prompts=200).to_dict()
