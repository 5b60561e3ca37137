"""The recorder's optional trace columns (replica, token ids, streamed chunks) and gzip text:
round trips in every format, defects named by file, line and field, old files unchanged."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailsieve.errors import TraceError
from tailsieve.workload.io import read_trace, trace_suffix, write_trace
from tailsieve.workload.trace import Trace

FORMATS = [".jsonl", ".csv", ".parquet", ".jsonl.gz", ".csv.gz"]


@st.composite
def recorded(draw: st.DrawFn) -> Trace:
    """A trace with the recorder's columns; chunk marks end at each response's length."""
    n = draw(st.integers(1, 12))
    lens = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    ids = [draw(st.lists(st.integers(0, 2**31), min_size=k, max_size=k)) for k in lens]
    cols: dict[str, object] = {"token_ids": ids}
    if draw(st.booleans()):
        cols["replica"] = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
    if draw(st.booleans()):
        times, marks = [], []
        for k in lens:
            m = draw(st.integers(1, 3))
            ts = sorted(draw(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=m,
                                      max_size=m)))
            ks = sorted(draw(st.lists(st.integers(0, k), min_size=m - 1, max_size=m - 1)))
            times.append(ts)
            marks.append([*ks, k])
        cols["chunk_times_s"], cols["chunk_tokens"] = times, marks
    return Trace.from_columns(
        prompt_id=[f"p{i // 3}" for i in range(n)],
        sample=[i % 3 for i in range(n)],
        step=[0] * n,
        response_tokens=lens,
        finish_reason=draw(st.lists(st.sampled_from(["stop", "length"]), min_size=n,
                                    max_size=n)),
        **cols,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("suffix", FORMATS)
@pytest.mark.parametrize("engine", ["auto", "python"])
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=recorded())
def test_round_trip_with_recorder_columns(
    tmp_path: Path, suffix: str, engine: str, trace: Trace
) -> None:
    path = tmp_path / f"t{suffix}"
    write_trace(trace, path)
    back = read_trace(path, engine=engine)  # type: ignore[arg-type]
    assert back.same_rows(trace), (trace.to_rows(), back.to_rows())


def test_gzip_is_deterministic_and_compressed(tmp_path: Path) -> None:
    tr = Trace.from_columns(["a"] * 50, [40] * 50, token_ids=[[7] * 40] * 50)
    write_trace(tr, tmp_path / "a.jsonl.gz")
    write_trace(tr, tmp_path / "b.jsonl.gz")
    write_trace(tr, tmp_path / "c.jsonl")
    a = (tmp_path / "a.jsonl.gz").read_bytes()
    assert a == (tmp_path / "b.jsonl.gz").read_bytes()
    assert gzip.decompress(a) == (tmp_path / "c.jsonl").read_bytes()
    assert len(a) * 5 < (tmp_path / "c.jsonl").stat().st_size
    assert trace_suffix("x/T.JSONL.GZ") == ".jsonl.gz" and trace_suffix("a.gz") == ""


def test_old_columns_only_write_as_before(tmp_path: Path) -> None:
    tr = Trace.from_columns(["a", "a"], [3, 4], finish_reason=["stop", "length"])
    write_trace(tr, tmp_path / "t.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert list(rows[0]) == ["prompt_id", "step", "sample", "response_tokens", "finish_reason"]


def test_unknown_columns_are_ignored_and_lengths_rewritten_drop_lists(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt_id": "a", "sample": 0, "response_tokens": 2,
                                "token_ids": [5, 6], "text": "hi", "logprobs": [0.1]}) + "\n")
    tr = read_trace(path)
    assert tr.token_ids is not None and tr.token_ids[0] == (5, 6)
    longer = tr.with_lengths([3])
    assert longer.token_ids is None and longer.response_tokens.tolist() == [3]


ROW = {"prompt_id": "a", "sample": 0, "response_tokens": 2}
TWO = {"chunk_times_s": [0.1, 0.2], "chunk_tokens": [1, 2]}
CASES = {
    "ids_count": ({"token_ids": [1]}, "token_ids", "1 ids for response_tokens 2"),
    "ids_type": ({"token_ids": [1, "x"]}, "token_ids", "expected a list of integers"),
    "ids_float": ({"token_ids": [1, 2.5]}, "token_ids", "expected a list of integers"),
    "ids_scalar": ({"token_ids": 3}, "token_ids", "expected a list"),
    "ids_negative": ({"token_ids": [1, -2]}, "token_ids", "negative id"),
    "replica_negative": ({"replica": -1}, "replica", "negative"),
    "times_alone": ({"chunk_times_s": [0.1]}, "chunk_times_s", "needs column 'chunk_tokens'"),
    "times_down": ({**TWO, "chunk_times_s": [0.2, 0.1]}, "chunk_times_s", "non-decreasing"),
    "times_negative": ({**TWO, "chunk_times_s": [-1, 0.1]}, "chunk_times_s", ">= 0"),
    "marks_short": ({**TWO, "chunk_tokens": [2]}, "chunk_tokens", "1 marks for 2 chunk times"),
    "marks_end": ({**TWO, "chunk_tokens": [1, 1]}, "chunk_tokens", "last mark 1"),
    "marks_down": ({**TWO, "chunk_tokens": [2, 1]}, "chunk_tokens", "non-decreasing"),
}


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_defects_name_line_and_field(tmp_path: Path, case: str, engine: str, suffix: str) -> None:
    extra, field, what = CASES[case]
    good = {**ROW, **{k: v for k, v in extra.items() if k != "replica"}}
    if case in ("ids_count", "ids_type", "ids_float", "ids_scalar", "ids_negative"):
        good["token_ids"] = [1, 2]
    if case == "replica_negative":
        good["replica"] = 0
    if case.startswith(("times_", "marks_")) and case != "times_alone":
        good.update(TWO)
    text = json.dumps(good) + "\n" + json.dumps({**ROW, "sample": 1, **extra}) + "\n"
    path = tmp_path / f"bad{suffix}"
    data = text.encode()
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    with pytest.raises(TraceError) as err:
        read_trace(path, engine=engine)  # type: ignore[arg-type]
    msg = str(err.value)
    assert str(path) in msg and f"'{field}'" in msg and what in msg, msg
    if case != "times_alone":
        assert "line 2" in msg, msg


def test_csv_cell_that_is_not_a_list(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text('prompt_id,sample,response_tokens,token_ids\na,0,2,"[1,2]"\na,1,1,[oops\n')
    for engine in ("auto", "python"):
        with pytest.raises(TraceError, match=r"line 3: field 'token_ids': not a JSON list"):
            read_trace(path, engine=engine)  # type: ignore[arg-type]


def test_broken_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    good = gzip.compress((json.dumps(ROW) + "\n").encode() * 200)
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(TraceError, match="not a complete gzip file"):
        read_trace(path)
    path.write_bytes(b"plain text, not gzip\n")
    with pytest.raises(TraceError, match="not a complete gzip file"):
        read_trace(path)
