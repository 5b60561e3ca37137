"""The shipped SmolLM2 trace (``smollm2-math``): package data with provenance, a valid recording
of the shipped prompts, and a workload preset the simulator and the trace tools take by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tailsieve.cli.main import main
from tailsieve.runtime.prompt_file import read_prompt_set
from tailsieve.sim.api import simulate
from tailsieve.workload import load_workload, read_trace
from tailsieve.workload.copies import sibling_copies
from tailsieve.workload.shipped import PROVENANCE_PATH, SMOLLM2_TRACE_PATH, resolve_trace_path
from tailsieve.workload.workload_model import ReplayWorkload

REPO = Path(__file__).resolve().parents[2]
EOS = 2  # SmolLM2's <|im_end|>


def test_shipped_with_provenance_and_small() -> None:
    assert SMOLLM2_TRACE_PATH.is_relative_to(REPO / "src" / "tailsieve")
    assert SMOLLM2_TRACE_PATH.stat().st_size < 4_000_000
    text = PROVENANCE_PATH.read_text()
    for needle in ("SmolLM2-135M-Instruct", "vLLM", "0.32.0", "Q4_1", "temperature",
                   "tailsieve record run", "lscpu"):
        assert needle in text, needle


def test_a_recording_of_the_shipped_prompts() -> None:
    tr = read_trace("smollm2-math")
    assert tr.num_rows == 128 * 8 * 2 and tr.num_prompts == 128
    assert sorted(set(tr.step.tolist())) == [0, 1]
    assert set(np.bincount(tr.cell_index()[2]).tolist()) == {8}
    prompts = read_prompt_set("math").head(128)
    assert set(tr.prompt_names) == {p.prompt_id for p in prompts.prompts}
    assert tr.finish_reason is not None and tr.token_ids is not None
    assert tr.correct is not None and tr.replica is not None and tr.prompt_tokens is not None
    cut = tr.finish_reason == "length"
    assert np.all(tr.response_tokens[cut] == 1024) and np.all(tr.response_tokens <= 1024)
    assert set(tr.finish_reason.tolist()) == {"stop", "length"}
    assert all(tr.token_ids[i][-1] == EOS for i in np.flatnonzero(~cut))
    assert set(tr.replica.tolist()) == {0, 1}
    for code in range(tr.num_prompts):  # one tokenization per prompt
        assert len(set(tr.prompt_tokens[tr.prompt_codes == code].tolist())) == 1
    assert tr.chunk_times_s is not None and tr.chunk_tokens is not None
    # a clean recording: a seed per request, no response an exact copy of a sibling's
    assert sibling_copies(tr).num_copies == 0
    info = json.loads(SMOLLM2_TRACE_PATH.with_name(SMOLLM2_TRACE_PATH.name[:-len(".jsonl.gz")]
                                                   + ".info.json").read_text())
    assert info["run_seed"] is not None and info["sibling_copies"]["num_copies"] == 0


def test_preset_replays_the_two_epochs() -> None:
    wl = load_workload("smollm2-math")
    assert isinstance(wl, ReplayWorkload) and wl.num_steps == 2 and wl.max_tokens == 1024
    tr = read_trace(SMOLLM2_TRACE_PATH)
    rng = np.random.default_rng(0)
    pid = tr.prompt_names[5]
    for step in (0, 1, 2):
        want = tr.response_tokens[(tr.prompt_id_array() == pid) & (tr.step == step % 2)]
        order = tr.sample[(tr.prompt_id_array() == pid) & (tr.step == step % 2)]
        assert wl.group_lengths(pid, step, 8, rng).tolist() == want[np.argsort(order)].tolist()


def test_simulator_and_trace_tools_take_it_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    res = simulate("smollm2-math", policies=["uniform-requests", "tailsieve"], replicas=2,
                   groups=16, steps=4, profile="cpu")
    assert res.summaries["uniform"]["steady_step_s"] > 0
    monkeypatch.chdir(tmp_path)  # found by name from any folder
    assert resolve_trace_path("smollm2-math") == SMOLLM2_TRACE_PATH
    assert main(["simulate", "--workload", "smollm2-math", "--replicas", "2", "--groups", "16",
                 "--steps", "3", "--profile", "cpu", "--policy", "uniform-requests",
                 "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["settings"]["workload"] == "smollm2-math"
    assert main(["trace", "stats", "smollm2-math", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["num_steps"] == 2 and stats["truncation_source"] == "finish_reason"
    assert main(["trace", "capture", "smollm2-math", "--rounds", "5", "--json"]) == 0
