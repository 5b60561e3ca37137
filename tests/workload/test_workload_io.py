"""Trace I/O: round trips in every format and precise errors for every defect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailsieve.errors import TraceError
from tailsieve.workload.io import read_trace, write_trace
from tailsieve.workload.trace import Trace

FORMATS = [".jsonl", ".csv", ".parquet"]

ids = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x00"),
    min_size=1,
    max_size=12,
)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    names = draw(st.lists(ids, min_size=1, max_size=5, unique=True))
    keys = draw(
        st.lists(
            st.tuples(st.sampled_from(names), st.integers(0, 3), st.integers(0, 9)),
            min_size=1,
            max_size=30,
            unique=True,
        )
    )
    n = len(keys)
    lens = draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n))
    opt = draw(st.sets(st.sampled_from(["prompt_tokens", "finish_reason", "correct"])))
    extra: dict[str, object] = {}
    if "prompt_tokens" in opt:
        extra["prompt_tokens"] = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n))
    if "finish_reason" in opt:
        extra["finish_reason"] = draw(
            st.lists(
                st.sampled_from(["stop", "length", "abort, x", 'q"uote']), min_size=n, max_size=n
            )
        )
    if "correct" in opt:
        extra["correct"] = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return Trace.from_columns(
        prompt_id=[k[0] for k in keys],
        step=[k[1] for k in keys],
        sample=[k[2] for k in keys],
        response_tokens=lens,
        **extra,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("suffix", FORMATS)
@pytest.mark.parametrize("engine", ["auto", "python"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(trace=traces())
def test_round_trip(tmp_path: Path, suffix: str, engine: str, trace: Trace) -> None:
    path = tmp_path / f"t{suffix}"
    write_trace(trace, path)
    back = read_trace(path, engine=engine)  # type: ignore[arg-type]
    assert back.same_rows(trace), (trace.to_rows(), back.to_rows())


def test_aime_reads_without_step(aime_path: Path) -> None:
    tr = read_trace(aime_path)
    assert tr.num_rows == 596 * 8 and tr.num_prompts == 596
    assert set(tr.step.tolist()) == {0}
    assert tr.correct is not None and int(tr.response_tokens.max()) == 16000
    assert tr.same_rows(read_trace(aime_path, engine="python"))


CSV_HEAD = "prompt_id,sample,response_tokens\n"
CSV_CASES = {
    "missing_column": ("prompt_id,sample\na,0\n", "line 1", "response_tokens", "missing column"),
    "negative": (CSV_HEAD + "a,0,5\na,1,-3\n", "line 3", "response_tokens", "negative"),
    "non_integer": (CSV_HEAD + "a,0,5\na,1,3.5\n", "line 3", "response_tokens", "non-integer"),
    "non_numeric": (CSV_HEAD + "a,0,5\n\na,1,abc\n", "line 4", "response_tokens", "non-numeric"),
    "bad_sample": (CSV_HEAD + "a,x,5\n", "line 2", "sample", "non-numeric"),
    "empty_value": (CSV_HEAD + "a,0,\n", "line 2", "response_tokens", "missing value"),
    "duplicate": (CSV_HEAD + "a,0,5\nb,0,6\na,0,7\n", "line 4", "sample", "duplicate"),
    "short_row": (CSV_HEAD + "a,0,5\na,1\n", "line 3", "response_tokens", "expected 3 fields"),
    "bad_bool": (
        "prompt_id,sample,response_tokens,correct\na,0,5,maybe\n",
        "line 2",
        "correct",
        "boolean",
    ),
}


@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_csv_defects(tmp_path: Path, case: str, engine: str) -> None:
    text, where, field, what = CSV_CASES[case]
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        read_trace(path, engine=engine)  # type: ignore[arg-type]
    msg = str(err.value)
    assert str(path) in msg and where in msg and f"'{field}'" in msg and what in msg, msg


def _jl(*objs: object) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


ROW = {"prompt_id": "a", "sample": 0, "response_tokens": 5}
JSONL_CASES = {
    "missing_column": (
        _jl({"prompt_id": "a", "sample": 0}),
        "line 1",
        "response_tokens",
        "missing",
    ),
    "missing_field": (
        _jl(ROW, {"prompt_id": "a", "sample": 1}),
        "line 2",
        "response_tokens",
        "missing field",
    ),
    "negative": (
        _jl(ROW, {**ROW, "sample": 1, "response_tokens": -1}),
        "line 2",
        "response_tokens",
        "negative",
    ),
    "non_integer": (
        _jl({**ROW, "response_tokens": 2.5}),
        "line 1",
        "response_tokens",
        "non-integer",
    ),
    "non_numeric": (
        _jl(ROW, {**ROW, "sample": 1, "response_tokens": "x"}),
        "line 2",
        "response_tokens",
        "non-numeric",
    ),
    "null": (_jl({**ROW, "response_tokens": None}), "line 1", "response_tokens", "missing value"),
    "duplicate": (_jl({**ROW, "step": 0}, {**ROW, "step": 0}), "line 2", "sample", "duplicate"),
    "bool_length": (
        _jl({**ROW, "response_tokens": True}),
        "line 1",
        "response_tokens",
        "non-numeric",
    ),
}


@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("case", sorted(JSONL_CASES))
def test_jsonl_defects(tmp_path: Path, case: str, engine: str) -> None:
    text, where, field, what = JSONL_CASES[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        read_trace(path, engine=engine)  # type: ignore[arg-type]
    msg = str(err.value)
    assert str(path) in msg and where in msg and f"'{field}'" in msg and what in msg, msg


@pytest.mark.parametrize("engine", ["auto", "python"])
def test_truncated_jsonl_is_reported(tmp_path: Path, engine: str) -> None:
    rows = [{**ROW, "sample": i} for i in range(5)]
    text = _jl(*rows)
    path = tmp_path / "cut.jsonl"
    path.write_text(text[: len(text) - 12])  # last line cut mid-object
    with pytest.raises(TraceError, match=r"line 5: truncated record"):
        read_trace(path, engine=engine)  # type: ignore[arg-type]


def test_malformed_middle_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(_jl(ROW) + "{oops\n" + _jl({**ROW, "sample": 1}))
    with pytest.raises(TraceError, match=r"line 2: malformed JSON"):
        read_trace(path)


@pytest.mark.parametrize("suffix", FORMATS)
def test_empty_file(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"empty{suffix}"
    path.write_text("")
    with pytest.raises(TraceError, match="empty"):
        read_trace(path)


def test_header_only_csv(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text(CSV_HEAD)
    with pytest.raises(TraceError, match="no data rows"):
        read_trace(path)


def test_unknown_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(tmp_path / "x.txt")
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace(tmp_path / "x.csv")


def test_parquet_defects(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "bad.parquet"
    pq.write_table(
        pa.table({"prompt_id": ["a", "a"], "sample": [0, 1], "response_tokens": [3.0, 2.5]}), path
    )
    with pytest.raises(TraceError, match=r"row 2: field 'response_tokens': non-integer"):
        read_trace(path)
    pq.write_table(
        pa.table({"prompt_id": ["a", "a"], "sample": [0, 0], "response_tokens": [3, 2]}), path
    )
    with pytest.raises(TraceError, match=r"row 2: field 'sample': duplicate"):
        read_trace(path)
    pq.write_table(pa.table({"prompt_id": ["a"], "response_tokens": [3]}), path)
    with pytest.raises(TraceError, match=r"field 'sample': missing column"):
        read_trace(path)


def test_without_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parquet names the extra; CSV and JSONL work through the pure-Python parsers."""
    import sys

    for mod in ("pyarrow", "pyarrow.csv", "pyarrow.json", "pyarrow.parquet", "pyarrow.compute"):
        monkeypatch.setitem(sys.modules, mod, None)  # import -> ImportError
    tr = Trace.from_columns(
        prompt_id=["a", "b"], response_tokens=[1, 2], finish_reason=["stop", "length"]
    )
    with pytest.raises(TraceError, match=r"pip install 'tailsieve\[parquet\]'"):
        write_trace(tr, tmp_path / "x.parquet")
    (tmp_path / "y.parquet").write_bytes(b"PAR1")
    with pytest.raises(TraceError, match=r"tailsieve\[parquet\]"):
        read_trace(tmp_path / "y.parquet")
    for suffix in (".csv", ".jsonl"):
        write_trace(tr, tmp_path / f"x{suffix}")
        assert read_trace(tmp_path / f"x{suffix}").same_rows(tr)
    with pytest.raises(TraceError, match="pyarrow is not installed"):
        read_trace(tmp_path / "x.csv", engine="pyarrow")


def test_checkpoint_alias_and_default_sample(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("prompt_id,checkpoint,sample,response_tokens\na,3,0,7\n")
    tr = read_trace(path)
    assert tr.step.tolist() == [3]
    auto = Trace.from_columns(prompt_id=["a", "a", "b"], response_tokens=[1, 2, 3])
    assert auto.sample.tolist() == [0, 1, 0]
    assert np.array_equal(auto.prompt_codes, [0, 0, 1])


@pytest.mark.parametrize("engine", ["auto", "python"])
def test_empty_prompt_id_rejected(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "e.csv"
    path.write_text(CSV_HEAD + "a,0,5\n,1,6\n")
    with pytest.raises(TraceError, match=r"line 3: field 'prompt_id': missing value"):
        read_trace(path, engine=engine)  # type: ignore[arg-type]


def test_binary_garbage_is_a_trace_error(tmp_path: Path) -> None:
    path = tmp_path / "bin.csv"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceError, match="not UTF-8"):
        read_trace(path)
    path = tmp_path / "bin.jsonl"
    path.write_bytes(_jl(ROW).encode() + b"\xff\n")
    with pytest.raises(TraceError, match="line 2: malformed JSON"):
        read_trace(path)
