"""Bad input to every command: exit 2, one ``error:`` line, no traceback, nothing written.

Each case runs the console entry point in a fresh folder holding only its input files; the
folder must be unchanged afterwards (no run folder, log, plot or trace started). Rollout cases
name an endpoint where nothing listens: the error they expect comes from the checks made before
any replica is contacted. The wrong ``--model`` cases need replicas that answer: two emulators
serving different model names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.runtime.emulator import EmulatorFleet

NOWHERE = "http://127.0.0.1:9,http://127.0.0.1:7"  # nothing listens: contacting them would be
# a different error
MODEL = "tailsieve-emulated"
OTHER = "other-model"


def _prompts(n: int) -> str:
    return "".join(json.dumps({"prompt_id": f"p{i}", "prompt": f"q {i}"}) + "\n" for i in range(n))


def _inputs(root: Path) -> None:
    lines = _prompts(10).splitlines(keepends=True)
    lines[5] = '{"prompt_id": "p5", "prompt": "a\tb"}\n'  # line 6: a raw tab inside a string
    files = {
        "prompts40.jsonl": _prompts(40),
        "bad6.jsonl": "".join(lines),
        "blank.jsonl": "\n  \n",
        "dup.jsonl": _prompts(3) + json.dumps({"prompt_id": "p1", "prompt": "again"}) + "\n",
        "fields.jsonl": json.dumps({"prompt_id": "a", "prompt_token_ids": ["x"]}) + "\n",
        "list.jsonl": "[1, 2]\n",
        "neither.jsonl": json.dumps({"prompt_id": "a"}) + "\n",
        "textkey.jsonl": json.dumps({"prompt_id": "a", "text": "hi"}) + "\n",
        "notjson.json": "not json {\n",
        "noendpoints.json": json.dumps({"replicas": []}),
        "trace-bad.jsonl": "garbage\n",
        "afile": "",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "adir").mkdir()


RO = ["rollout", "--endpoints", NOWHERE, "--max-tokens", "16", "--out", "out"]
RO40 = [*RO, "--prompts", "prompts40.jsonl"]
SIM = ["simulate", "--replicas", "2", "--groups", "4", "--group-size", "2", "--steps", "2",
       "--num-prompts", "50", "--out", "sim"]  # fmt: skip
CASES: list[tuple[str, list[str], str]] = [
    # the table
    ("prompts-missing", [*RO, "--prompts", "nope.jsonl"], "--prompts nope.jsonl: no such file"),
    ("prompts-folder", [*RO, "--prompts", "adir"], "--prompts adir: is a folder, not a file"),
    ("state-missing", ["rollout", "--state", "missing.json", "--prompts", "prompts40.jsonl",
                       "--out", "out"], "--state missing.json: no such file"),
    ("prompts-line-6", [*RO, "--prompts", "bad6.jsonl"],
     "bad6.jsonl:6: not JSON: Invalid control character at: line 6 column 33"),
    ("prompts-too-few", [*RO40, "--groups", "16", "--steps", "4"],
     "prompts40.jsonl has 40 prompts; --groups 16 x --steps 4 needs at least 72: 64 delivered"),
    ("model-wrong-on-one", ["rollout", "--endpoints", "{urls}", "--prompts", "prompts40.jsonl",
                            "--groups", "2", "--model", MODEL, "--out", "out"],
     f"--model '{MODEL}' is not served by replica 1 ({{url1}}, serves {OTHER});"),
    # more rollout input
    ("model-wrong-on-all", ["rollout", "--endpoints", "{urls}", "--prompts", "prompts40.jsonl",
                            "--groups", "2", "--model", "nope", "--out", "out"],
     f"by replica 0 ({{url0}}, serves {MODEL}) nor replica 1 ({{url1}}, serves {OTHER})"),
    ("prompts-too-few-uniform", [*RO40, "--groups", "16", "--steps", "4", "--policy", "uniform"],
     "needs at least 64: 64 delivered (16 per step); give at least 64 prompts or at most "
     "--steps 2"),
    ("prompts-blank", [*RO, "--prompts", "blank.jsonl"], "no prompts"),
    ("prompts-duplicate-id", [*RO, "--prompts", "dup.jsonl"],
     "dup.jsonl:4: prompt_id 'p1' repeats line 2"),
    ("prompts-bad-field", [*RO, "--prompts", "fields.jsonl"], "fields.jsonl:1: bad prompt fields"),
    ("prompts-not-object", [*RO, "--prompts", "list.jsonl"],
     "list.jsonl:1: expected a JSON object, got list"),
    ("prompts-no-text", [*RO, "--prompts", "neither.jsonl"],
     "neither.jsonl:1: prompt 'a': give exactly one of 'prompt', 'prompt_token_ids', 'messages' "
     "(the line has no other field)"),
    ("prompts-wrong-key", [*RO, "--prompts", "textkey.jsonl"],
     "textkey.jsonl:1: prompt 'a': give exactly one of 'prompt', 'prompt_token_ids', 'messages' "
     "(the line has ['text'])"),
    ("stream-interval-no-stream", [*RO, "--prompts", "prompts40.jsonl", "--stream-interval", "16"],
     "stream_interval needs stream=True on a vLLM backend"),
    ("no-split-with-moves", [*RO40, "--groups", "2", "--no-split"],
     "split_groups=False (--no-split: one request with n responses per group) cannot run with "
     "continuation"),
    ("state-not-json", ["rollout", "--state", "notjson.json", "--prompts", "prompts40.jsonl"],
     "--state notjson.json: not a launch state file (not JSON: Expecting value: line 1"),
    ("state-no-endpoints", ["rollout", "--state", "noendpoints.json", "--prompts",
                            "prompts40.jsonl"], "no 'endpoints' list"),
    ("state-folder", ["rollout", "--state", "adir", "--prompts", "prompts40.jsonl"],
     "--state adir: is a folder"),
    ("out-is-a-file", [*RO40, "--groups", "2", "--out", "afile"],
     "--out afile: exists and is not a folder"),
    ("log-file-folder", [*RO40, "--groups", "2", "--log-file", "adir"],
     "--log-file adir: is a folder"),
    ("metrics-port", [*RO40, "--groups", "2", "--metrics-port", "99999"],
     "--metrics-port must be in 1..65535"),
    ("rollout-profile-missing", [*RO40, "--groups", "2", "--profile", "nope.json"],
     "profile file not found: nope.json"),
    ("rollout-auto-fallback-missing", [*RO40, "--groups", "2", "--profile", "auto:nope.json"],
     "profile file not found: nope.json"),
    ("replay-trace-missing", [*RO, "--replay-trace", "nope.jsonl"],
     "nope.jsonl: no such trace file"),
    ("replay-trace-folder", [*RO, "--replay-trace", "adir"], "adir: is a folder"),
    ("no-prompt-source", RO, "give --prompts FILE or --replay-trace FILE"),
    ("no-endpoints", ["rollout", "--prompts", "prompts40.jsonl"], "give --endpoints"),
    # simulate, trace, oracle
    ("simulate-workload-missing", [*SIM, "--workload", "nope.jsonl"], "no such trace file"),
    ("simulate-profile-not-json", [*SIM, "--profile", "notjson.json"], "not valid JSON"),
    ("simulate-out-is-a-file", [*SIM, "--out", "afile"], "--out afile: exists and is not a"),
    ("simulate-plot-is-a-file", [*SIM, "--plot", "afile"], "--plot afile: exists and is not"),
    ("simulate-policy", [*SIM, "--policy", "nope"], "unknown policy 'nope'"),
    ("simulate-auto-profile", [*SIM, "--profile", "auto"], "fitted online from a live"),
    ("simulate-tail-spec", [*SIM, "--tail-spec", "warp:3"], "warp"),
    ("simulate-seeds", [*SIM, "--seeds", "0"], "--seeds must be >= 1"),
    ("simulate-kv-capacity", [*SIM, "--kv-capacity", "-5"], "--kv-capacity must be >= 0"),
    ("trace-stats-folder", ["trace", "stats", "adir"], "adir: is a folder, not a trace file"),
    ("trace-stats-malformed", ["trace", "stats", "trace-bad.jsonl"],
     "trace-bad.jsonl: line 1: malformed JSON"),
    ("trace-stats-plot-folder", ["trace", "stats", "aime", "--plot", "adir"],
     "--plot adir: is a folder"),
    ("trace-synth-no-folder", ["trace", "synth", "--preset", "aime-r1", "--prompts", "10",
                               "--out", "nodir/t.jsonl"], "no such folder nodir"),
    ("trace-transform-missing", ["trace", "transform", "nope.jsonl", "--tail-strength", "2",
                                 "--out", "t.jsonl"], "nope.jsonl: no such trace file"),
    ("trace-capture-missing", ["trace", "capture", "nope.jsonl"], "no such trace file"),
    ("oracle-trace-missing", ["oracle", "--trace", "nope.csv"], "no such trace file"),
    ("oracle-lengths", ["oracle", "--lengths", "1,abc"], "entry 2: 'abc' is not a number"),
    ("oracle-prompts-count", ["oracle", "--lengths", "1,2,3", "--prompts", "1,2"],
     "--prompts has 2 entries"),
    ("oracle-profile", ["oracle", "--lengths", "1,2", "--profile", "tpu"], "unknown profile"),
    ("oracle-sweep-trace-missing", ["oracle-sweep", "--trace", "nope.csv"], "no such trace"),
    # profiles, profile, demo, report, emulate, launch
    ("profiles-show-missing", ["profiles", "--show", "nope.json"], "profile file not found"),
    ("profiles-compare-bad", ["profiles", "compare", "notjson.json", "cpu"], "not valid JSON"),
    ("profile-config-missing", ["profile", "--from-config", "nope.json"],
     "model config not found"),
    ("profile-config-not-json", ["profile", "--from-config", "notjson.json"], "not valid JSON"),
    ("profile-out-folder", ["profile", "--model", "qwen3-4b", "--out", "adir"],
     "--out adir: is a folder"),
    ("profile-gpu", ["profile", "--model", "qwen3-4b", "--gpu", "v100"], "unknown gpu 'v100'"),
    ("demo-workload-missing", ["demo", "--workload", "nope.jsonl", "--out", "demo",
                               "--no-progress"], "no such trace file"),
    ("demo-profile-missing", ["demo", "--profile", "nope.json", "--out", "demo",
                              "--no-progress"], "profile file not found"),
    ("demo-out-is-a-file", ["demo", "--out", "afile", "--no-progress"], "--out afile: exists"),
    ("demo-one-replica", ["demo", "--replicas", "1", "--out", "demo", "--no-progress"],
     "replicas"),
    ("report-missing", ["report", "nope"], "run directory not found: nope"),
    ("report-empty-folder", ["report", "adir"], "adir: no run data found"),
    ("emulate-profile-missing", ["emulate", "--profile", "nope.json", "--port", "0"],
     "profile file not found"),
    ("launch-stop-missing", ["launch", "--stop", "missing.json"], "cannot read the state file"),
    ("launch-stop-not-json", ["launch", "--stop", "notjson.json"], "cannot read the state file"),
    ("launch-no-model", ["launch", "--ray", "--engines", "vllm*2"], "--model is required"),
]


@pytest.fixture(scope="module")
def two_models() -> Iterator[EmulatorFleet]:
    """Replica 0 serves MODEL, replica 1 serves OTHER (free ports)."""
    fleet = EmulatorFleet.start(
        2, profile="cpu", time_scale=0.01, model_name=MODEL, overrides=[{}, {"model_name": OTHER}]
    )
    try:
        yield fleet
    finally:
        fleet.close()


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(("argv", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_error_line_and_writes_nothing(
    argv: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    if any("{urls}" in a for a in argv):
        urls = request.getfixturevalue("two_models").urls
        fill = {"urls": ",".join(urls), "url0": urls[0], "url1": urls[1]}
        argv = [a.format(**fill) for a in argv]
        expected = expected.format(**fill)
    _inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    try:
        rc = main(argv)
    except BaseException as exc:  # a traceback: what this test forbids
        pytest.fail(f"{argv} raised {exc!r} instead of exiting 2 with one line")
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert expected in lines[0]
    assert _tree(tmp_path) == before, "a bad input must not write anything"
