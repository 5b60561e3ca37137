"""The recorder's logic against the stub transport (``runtime.stub``): every prompt x sample x
epoch recorded once, the columns it fills, a distinct seed on every request sent (by default),
the sibling copies an unseeded recording makes, the answer check, the replicas, streamed chunk
times, and bad input (settings, prompt files, unreachable servers)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.record import recorder
from tailsieve.record.recorder import RecordConfig, Recording, record_rollouts
from tailsieve.record.seeds import group_seed
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.runtime.prompt_file import PromptSet, read_prompt_set
from tailsieve.runtime.stub import StubFault, StubTransport, token_at
from tailsieve.workload.io import read_trace

URLS = ["http://r0", "http://r1"]


def length_of(prompt: str, sample: int) -> int:
    return 3 + (sum(map(ord, prompt)) * 7 + sample * 13) % 29


def prompt_set(num: int, answers: dict[str, float] | None = None) -> PromptSet:
    return PromptSet(tuple(PromptInput(f"q{i}", text=f"q{i}") for i in range(num)),
                     answers or {}, "<test>")


def run(pset: PromptSet, cfg: RecordConfig, transport: StubTransport) -> Recording:
    return asyncio.run(record_rollouts(URLS, pset, cfg, transport=transport))


@pytest.mark.parametrize("stream", [False, True])
def test_every_response_recorded_once_with_its_tokens(stream: bool) -> None:
    t = StubTransport(length_of, seconds_per_token=0.0002)
    cfg = RecordConfig(group_size=4, num_epochs=2, backend="vllm", max_tokens=20, seed=100,
                       stream=stream, groups_per_step=3)
    rec = run(prompt_set(6), cfg, t)
    tr = rec.trace
    assert tr.num_rows == 6 * 4 * 2 and sorted(set(tr.step.tolist())) == [0, 1]
    keys = set(zip(tr.prompt_id_array().tolist(), tr.step.tolist(), tr.sample.tolist(),
                   strict=True))
    assert len(keys) == tr.num_rows
    seeds = [s for _, _, s in t.log.started]
    assert len(seeds) == 6 * 4 * 2 and len(set(seeds)) == len(seeds)  # one seed per request
    assert sorted(seeds) == sorted(group_seed(100, f"q{k}", e) + i for k in range(6)
                                   for e in range(2) for i in range(4))
    assert tr.token_ids is not None and tr.prompt_tokens is not None
    for pid, step, smp, length, ids, ptoks, why in zip(
        tr.prompt_id_array(), tr.step, tr.sample, tr.response_tokens, tr.token_ids,
        tr.prompt_tokens, tr.finish_reason, strict=True,
    ):
        s0 = group_seed(100, pid, int(step)) + int(smp)  # the stub's sample identity is the seed
        assert length == min(length_of(pid, s0), 20)
        assert why == ("length" if length_of(pid, s0) > 20 else "stop")
        assert ids == tuple(token_at(s0, j) for j in range(length))
        assert ptoks == len(pid)  # the stub tokenizes one id per character
    assert {"stop", "length"} == set(tr.finish_reason.tolist())
    assert set(np.bincount(tr.replica).tolist()) == {tr.num_rows // 2}  # round-robin
    if stream:
        assert tr.chunk_times_s is not None and tr.chunk_tokens is not None
        assert all(ks[-1] == n for ks, n in zip(tr.chunk_tokens, tr.response_tokens,
                                                strict=True))
    else:
        assert tr.chunk_times_s is None and tr.chunk_tokens is None
    assert [s["epoch"] for s in rec.info["steps"]] == [0, 0, 1, 1]
    assert rec.info["config"]["seed"] == 100 and rec.info["num_prompts"] == 6
    assert rec.info["run_seed"] == 100 and rec.info["sibling_copies"]["num_copies"] == 0


def test_every_request_gets_its_own_seed_by_default() -> None:
    t = StubTransport(length_of)
    rec = run(prompt_set(5), RecordConfig(group_size=4, num_epochs=2, backend="vllm",
                                          max_tokens=8), t)
    seeds = [s for _, _, s in t.log.started]
    assert len(seeds) == 5 * 4 * 2 and min(seeds) >= 0 and len(set(seeds)) == len(seeds)
    run_seed = rec.info["run_seed"]
    assert isinstance(run_seed, int) and rec.info["config"]["seed"] is None
    assert set(seeds) == {group_seed(run_seed, f"q{k}", e) + i for k in range(5)
                          for e in range(2) for i in range(4)}
    other = StubTransport(length_of)  # a second recording draws another run seed
    assert run(prompt_set(5), RecordConfig(group_size=4, backend="vllm", max_tokens=8),
               other).info["run_seed"] != run_seed
    assert rec.info["sibling_copies"]["num_copies"] == 0


def test_a_part_keeps_the_seeds_of_its_epochs() -> None:
    whole, part = StubTransport(length_of), StubTransport(length_of)
    run(prompt_set(3), RecordConfig(group_size=2, num_epochs=2, backend="vllm", seed=7), whole)
    rec = run(prompt_set(3), RecordConfig(group_size=2, num_epochs=1, first_epoch=1,
                                          backend="vllm", seed=7), part)
    assert set(rec.trace.step.tolist()) == {1}
    assert {s for *_, s in part.log.started} < {s for *_, s in whole.log.started}


def test_correct_column_from_the_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    t = StubTransport(length_of)
    cfg = RecordConfig(group_size=3, backend="vllm", max_tokens=40, seed=0)
    # the stub answers "<prompt>:<seed>"; with these group seeds q1's sample 0 has seed 3
    monkeypatch.setattr(recorder, "group_seed", lambda _s, pid, _e: 3 * int(pid[1:]))
    rec = run(prompt_set(2, {"q0": 1.0, "q1": 3.0}), cfg, t)
    tr = rec.trace
    assert tr.correct is not None
    got = {(p, s): c for p, s, c in zip(tr.prompt_id_array(), tr.sample, tr.correct,
                                        strict=True)}
    assert got == {("q0", 0): False, ("q0", 1): True, ("q0", 2): False,
                   ("q1", 0): True, ("q1", 1): False, ("q1", 2): False}


def test_unseeded_requests_carry_no_seed_and_their_copies_are_flagged() -> None:
    # the stub, like two vLLM servers started with the same engine seed, draws the same numbers
    # for every unseeded request: each group's siblings come out token-identical
    t = StubTransport(length_of)
    rec = run(prompt_set(2), RecordConfig(group_size=3, backend="vllm", max_tokens=8,
                                          seeded=False), t)
    assert {s for _, _, s in t.log.started} == {-1}
    copies = rec.info["sibling_copies"]
    assert (copies["num_copies"], copies["num_groups_with_copies"]) == (2 * 2, 2)
    assert rec.info["run_seed"] is None and rec.info["seed_rule"] == "unseeded requests"


def test_write_round_trips_and_writes_info(tmp_path: Path) -> None:
    t = StubTransport(length_of, seconds_per_token=0.0002)
    rec = run(prompt_set(3), RecordConfig(group_size=2, backend="vllm", max_tokens=16,
                                           stream=True, num_epochs=2), t)
    info = rec.write(tmp_path / "rec.jsonl.gz")
    back = read_trace(tmp_path / "rec.jsonl.gz")
    assert back.same_rows(rec.trace)
    assert json.loads(info.read_text())["served_model"] == "stub"


def test_a_server_that_does_not_answer_is_one_clear_error() -> None:
    t = StubTransport(length_of, faults={"http://r1": StubFault(refuse=True)})
    with pytest.raises(ReplicaError, match=r"needs every server: http://r1 does not answer"):
        run(prompt_set(2), RecordConfig(group_size=2, backend="vllm"), t)
    t = StubTransport(length_of, faults={u: StubFault(refuse=True) for u in URLS})
    with pytest.raises(ReplicaError, match="no replica answers /health"):
        run(prompt_set(2), RecordConfig(group_size=2, backend="vllm"), t)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.5}, "temperature must be in"),
        ({"temperature": float("nan")}, "temperature must be in"),
        ({"top_p": 0.0}, "top_p must be in"),
        ({"max_tokens": 0}, "max_tokens must be >= 1"),
        ({"group_size": 0}, "group_size must be >= 1"),
        ({"num_epochs": 0}, "num_epochs must be >= 1"),
        ({"seed": -1}, "seed must be in"),
        ({"seed": 3, "seeded": False}, "needs seeded requests"),
        ({"first_epoch": -1}, "first_epoch must be >= 0"),
        ({"stream_interval": 4}, "needs stream=True"),
        ({"groups_per_step": 0}, "groups_per_step must be >= 1"),
        ({"backend": "triton"}, "triton"),
    ],
)
def test_out_of_range_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        RecordConfig(**kwargs)  # type: ignore[arg-type]


def test_settings_that_do_not_fit_the_prompts() -> None:
    t = StubTransport(length_of)
    with pytest.raises(ConfigError, match="groups_per_step 4 must divide the 6 prompts"):
        run(prompt_set(6), RecordConfig(groups_per_step=4, backend="vllm"), t)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt_id": "a", "prompt": "x"}\n{"prompt_id": "b"\n', r":2: malformed JSON"),
        ('{"prompt_id": "a", "prompt": "x"}\n{"prompt_id": "a", "prompt": "y"}\n',
         r":2: prompt_id 'a' repeats line 1"),
        ('{"prompt_id": "a", "prompt": "x", "answer": "seven"}\n',
         r":1: field 'answer': expected a finite number"),
        ('{"prompt_id": "a"}\n', r":1: prompt 'a': give exactly one of"),
        ('[1, 2]\n', r":1: expected a JSON object"),
        ('{"prompt_id": "a", "prompt": "x", "seed": 1.5}\n', r"seed must be an integer"),
        ("\n \n", "no prompts"),
    ],
)
def test_malformed_prompt_files(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message) as exc:
        read_prompt_set(f)
    assert "\n" not in str(exc.value) and str(f) in str(exc.value)


def test_prompt_sets() -> None:
    shipped = read_prompt_set("math")
    assert len(shipped.prompts) >= 256 and len(shipped.answers) == len(shipped.prompts)
    head = shipped.head(128)
    assert len(head.prompts) == 128 and set(head.answers) == {p.prompt_id for p in head.prompts}
    assert head.prompts[0].messages is not None
    with pytest.raises(ConfigError, match="--num-prompts 0 outside"):
        shipped.head(0)
    with pytest.raises(ConfigError, match="no such prompt file"):
        read_prompt_set("nope.jsonl")


def test_info_names_the_shipped_prompts_package_relative() -> None:
    t = StubTransport(length_of)
    shipped = read_prompt_set("math").head(2)
    text = PromptSet(tuple(PromptInput(p.prompt_id, text=p.prompt_id) for p in shipped.prompts),
                     {}, shipped.source)  # the stub takes text prompts
    rec = run(text, RecordConfig(group_size=1, backend="vllm", max_tokens=4), t)
    assert rec.info["prompts"] == "tailsieve/workload/data/math-word-problems.jsonl"
    assert not any(str(v).startswith("/") for v in rec.info.values())
