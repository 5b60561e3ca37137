"""A recording made in parts (``record.parts``): one epoch per run with the same run seed joins
into the trace and seeds of one run, and parts that are not one recording are refused."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.errors import ConfigError
from tailsieve.record.parts import join_parts, read_recording
from tailsieve.record.recorder import RecordConfig, Recording, record_rollouts
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.runtime.prompt_file import PromptSet
from tailsieve.runtime.stub import StubTransport
from tailsieve.workload.io import read_trace

URLS = ["http://r0", "http://r1"]
PROMPTS = PromptSet(tuple(PromptInput(f"q{i}", text=f"q{i}") for i in range(4)), {}, "<test>")


def length_of(prompt: str, sample: int) -> int:
    return 2 + (sum(map(ord, prompt)) + sample * 7) % 11


def part(first_epoch: int, num_epochs: int = 1, **kw: object) -> tuple[Recording, set[int]]:
    t = StubTransport(length_of)
    settings: dict[str, object] = {"group_size": 3, "backend": "vllm", "max_tokens": 12,
                                   "seed": 11, **kw}
    cfg = RecordConfig(first_epoch=first_epoch, num_epochs=num_epochs,
                       **settings)  # type: ignore[arg-type]
    rec = asyncio.run(record_rollouts(URLS, PROMPTS, cfg, transport=t))
    return rec, {s for *_, s in t.log.started}


def keyed(rec: Recording) -> dict[tuple[str, int, int], tuple[int, ...]]:
    tr = rec.trace
    assert tr.token_ids is not None
    return {(str(p), int(e), int(s)): ids for p, e, s, ids in zip(
        tr.prompt_id_array(), tr.step, tr.sample, tr.token_ids, strict=True)}


def test_parts_join_into_the_recording_of_one_run() -> None:
    whole, whole_seeds = part(0, 2)
    (p1, s1), (p0, s0) = part(1), part(0)
    joined = join_parts([p1, p0])  # any order
    assert s0 | s1 == whole_seeds and not s0 & s1
    assert keyed(joined) == keyed(whole)  # the stub's tokens follow the seed
    assert joined.trace.step.tolist() == sorted(joined.trace.step.tolist())
    info = joined.info
    assert info["config"]["num_epochs"] == 2 and info["config"]["first_epoch"] == 0
    assert [s["epoch"] for s in info["steps"]] == [0, 1]
    assert [p["epochs"] for p in info["parts"]] == [[0], [1]]
    assert info["wall_s"] == pytest.approx(p0.info["wall_s"] + p1.info["wall_s"])
    assert info["sibling_copies"]["num_copies"] == 0 and info["run_seed"] == 11


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"first_epoch": 0}, r"epochs \[0, 0\] are not 0..1"),
        ({"first_epoch": 2}, r"epochs \[0, 2\] are not 0..1"),
        ({"first_epoch": 1, "seed": 12}, "differs in run_seed"),
        ({"first_epoch": 1, "max_tokens": 10}, "differs in setting max_tokens"),
    ],
)
def test_parts_that_are_not_one_recording(second: dict[str, object], message: str) -> None:
    first, _ = part(0)
    other, _ = part(**second)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        join_parts([first, other])


def test_unseeded_parts_are_refused() -> None:
    a, _ = part(0, seed=None, seeded=False)
    b, _ = part(1, seed=None, seeded=False)
    with pytest.raises(ConfigError, match="unseeded parts cannot be joined"):
        join_parts([a, b])


def test_record_join_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for e in (0, 1):
        part(e)[0].write(tmp_path / f"e{e}.jsonl.gz")
    out = tmp_path / "all.jsonl.gz"
    assert main(["record", "join", str(tmp_path / "e0.jsonl.gz"), str(tmp_path / "e1.jsonl.gz"),
                 "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 4 * 3 * 2 and summary["sibling_copies"] == 0
    assert summary["run_seed"] == 11 and summary["epochs"] == 2
    assert read_trace(out).same_rows(read_recording(out).trace)
    (tmp_path / "lone.jsonl").write_text(
        '{"prompt_id": "a", "sample": 0, "response_tokens": 3}\n')
    assert main(["record", "join", str(tmp_path / "lone.jsonl"), "--out",
                 str(tmp_path / "x.jsonl")]) == 2
    assert "no lone.jsonl.info.json beside it" in capsys.readouterr().err
