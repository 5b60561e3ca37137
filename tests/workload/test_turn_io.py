"""Turn traces on disk: exact round trips in every format, single-turn traces read as one-turn
trajectories, every defect named by file, row and field, no row dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailsieve.errors import TraceError
from tailsieve.workload.io import read_trace, write_trace
from tailsieve.workload.trace import Trace
from tailsieve.workload.turn_io import read_turn_trace, trace_to_turns, write_turn_trace
from tailsieve.workload.turns import Trajectory, Turn, TurnTrace

FORMATS = [".jsonl", ".csv", ".parquet", ".jsonl.gz", ".csv.gz"]

turn_st = st.tuples(
    st.integers(1, 2**31),
    st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
    st.integers(0, 2**31),
)


@st.composite
def turn_traces(draw: st.DrawFn) -> TurnTrace:
    """Random trajectories: up to 3 prompts x 2 steps x 4 samples, 1-6 turns each."""
    keys = draw(st.lists(st.tuples(st.sampled_from(["a", "b,c", 'q"1']), st.integers(0, 1),
                                   st.integers(0, 3)), min_size=1, max_size=10, unique=True))
    with_reason = draw(st.booleans())
    trajs = []
    for pid, step, sample in keys:
        raw = draw(st.lists(turn_st, min_size=1, max_size=6))
        turns = [Turn(*r) for r in raw[:-1]] + [Turn(raw[-1][0])]
        reason = draw(st.sampled_from(["stop", "length"])) if with_reason else None
        trajs.append(Trajectory(pid, sample, draw(st.integers(0, 10**6)), turns, step, reason))
    return TurnTrace(tuple(trajs))


@pytest.mark.parametrize("suffix", FORMATS)
@pytest.mark.parametrize("engine", ["auto", "python"])
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tt=turn_traces())
def test_round_trip(tmp_path: Path, suffix: str, engine: str, tt: TurnTrace) -> None:
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    path = tmp_path / f"t{suffix}"
    write_turn_trace(tt, path)
    assert read_turn_trace(path, engine=engine if suffix != ".parquet" else "auto") == tt
    plain = read_trace(path)  # a turn trace is a length trace: total output per trajectory
    assert plain.response_tokens.tolist() == [t.output_tokens for t in tt.trajectories]


@pytest.mark.parametrize("name", ["aime", "smollm2-math"])
def test_shipped_single_turn_traces_read_as_one_turn_trajectories(name: str) -> None:
    trace = read_trace(name)
    tt = read_turn_trace(name)
    assert len(tt) == trace.num_rows
    assert all(t.num_turns == 1 and not t.turns[0].has_tool for t in tt.trajectories)
    assert [t.output_tokens for t in tt.trajectories] == trace.response_tokens.tolist()
    assert [t.sample for t in tt.trajectories] == trace.sample.tolist()
    if trace.prompt_tokens is None:
        assert {t.prompt_tokens for t in tt.trajectories} == {0}
        assert {t.prompt_tokens for t in read_turn_trace(name, 77).trajectories} == {77}
    else:
        assert [t.prompt_tokens for t in tt.trajectories] == trace.prompt_tokens.tolist()
        assert [t.finish_reason for t in tt.trajectories] == trace.finish_reason.tolist()


def test_single_turn_file_converts_without_loss(tmp_path: Path) -> None:
    trace = Trace.from_columns(["a", "a", "b"], [5, 7, 9], prompt_tokens=[3, 3, 4])
    write_trace(trace, tmp_path / "s.csv")
    tt = read_turn_trace(tmp_path / "s.csv")
    write_turn_trace(tt, tmp_path / "m.jsonl")
    assert read_turn_trace(tmp_path / "m.jsonl") == tt
    assert tt.trajectories[2] == Trajectory("b", 0, 4, (Turn(9),))


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GOOD = {"prompt_id": "p", "sample": 0, "response_tokens": 5, "turn_output_tokens": [2, 3],
        "turn_tool_s": [0.5, 0.0], "turn_tool_output_tokens": [9, 0]}

DEFECTS = {
    "zero_output": ({"turn_output_tokens": [0, 5]}, "turn_output_tokens", "turn 0 outputs 0"),
    "sum": ({"turn_output_tokens": [2, 4]}, "turn_output_tokens", "sum to 6"),
    "count": ({"turn_tool_s": [0.5]}, "turn_tool_s", "1 values for 2 turns"),
    "negative_tool": ({"turn_tool_s": [-0.5, 0.0]}, "turn_tool_s", "finite and >= 0"),
    "negative_tool_out": ({"turn_tool_output_tokens": [-9, 0]}, "turn_tool_output_tokens",
                          ">= 0"),
    "last_tool": ({"turn_tool_s": [0.5, 1.0]}, "turn_tool_s", "last turn has a tool call"),
    "last_tool_out": ({"turn_tool_output_tokens": [9, 4]}, "turn_tool_output_tokens",
                      "last turn has a tool call"),
    "no_turns": ({"response_tokens": 0, "turn_output_tokens": [], "turn_tool_s": [],
                  "turn_tool_output_tokens": []}, "turn_output_tokens", "no turns"),
    "float_tokens": ({"turn_output_tokens": [2.5, 2.5]}, "turn_output_tokens",
                     "list of integers"),
    "not_a_list": ({"turn_tool_s": "fast"}, "turn_tool_s", "not a JSON list"),
}


@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("case", sorted(DEFECTS))
def test_jsonl_defects_name_line_and_field(tmp_path: Path, case: str, engine: str) -> None:
    change, field, why = DEFECTS[case]
    rows = [GOOD, {**GOOD, "sample": 1}, {**GOOD, "sample": 2, **change}]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TraceError) as err:
        read_turn_trace(path, engine=engine)
    assert f"line 3: field '{field}'" in str(err.value)
    assert why in str(err.value)


def test_turn_columns_go_together(tmp_path: Path) -> None:
    row = {k: v for k, v in GOOD.items() if k != "turn_tool_output_tokens"}
    with pytest.raises(TraceError, match="'turn_output_tokens' needs column "
                                         "'turn_tool_output_tokens'"):
        read_turn_trace(_jsonl(tmp_path / "t.jsonl", [row]))


def test_csv_defect_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "prompt_id,sample,response_tokens,turn_output_tokens,turn_tool_s,turn_tool_output_tokens\n"
        'p,0,5,"[2,3]","[0.5,0.0]","[9,0]"\n'
        'p,1,5,"[2,3]","[0.5,2.0]","[9,0]"\n'
    )
    with pytest.raises(TraceError, match=r"line 3: field 'turn_tool_s': the last turn"):
        read_turn_trace(path)


def test_parquet_defect_names_the_row(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({
        "prompt_id": ["p", "p"], "sample": [0, 1], "response_tokens": [5, 5],
        "turn_output_tokens": [[2, 3], [1, 3]], "turn_tool_s": [[0.5, 0.0], [0.5, 0.0]],
        "turn_tool_output_tokens": [[9, 0], [9, 0]],
    })
    pq.write_table(table, tmp_path / "t.parquet")
    with pytest.raises(TraceError, match=r"row 2: field 'turn_output_tokens': turns sum to 4"):
        read_turn_trace(tmp_path / "t.parquet")


def test_zero_length_single_turn_row_is_named(tmp_path: Path) -> None:
    trace = Trace.from_columns(["a", "a"], [4, 0], source="x.csv")
    with pytest.raises(TraceError, match=r"x.csv: row 2: field 'response_tokens'"):
        trace_to_turns(trace)


def test_mixed_finish_reasons_cannot_be_written(tmp_path: Path) -> None:
    tt = TurnTrace((Trajectory("a", 0, 1, (Turn(1),), finish_reason="stop"),
                    Trajectory("a", 1, 1, (Turn(1),))))
    with pytest.raises(TraceError, match=r"trajectory 1 .*field 'finish_reason': missing"):
        write_turn_trace(tt, tmp_path / "t.jsonl")
    with pytest.raises(TraceError, match="default_prompt_tokens"):
        read_turn_trace("aime", -1)


def test_with_lengths_drops_turn_columns(tmp_path: Path) -> None:
    tt = TurnTrace((Trajectory("a", 0, 1, (Turn(2, 1.0, 3), Turn(4))),))
    write_turn_trace(tt, tmp_path / "t.jsonl")
    trace = read_trace(tmp_path / "t.jsonl")
    assert trace.turn_output_tokens is not None
    new = trace.with_lengths([9])
    assert new.turn_output_tokens is None and new.turn_tool_s is None
    assert trace_to_turns(new).trajectories[0].turns == (Turn(9),)
    assert trace.select([True]).same_rows(trace)
