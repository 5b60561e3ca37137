"""Exact sibling copies (``workload.copies``): found on a constructed trace, only within a
group (same prompt and step), each named with the sibling it repeats."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailsieve.errors import TraceError
from tailsieve.workload.copies import sibling_copies
from tailsieve.workload.trace import Trace


def trace(rows: list[tuple[str, int, int, tuple[int, ...]]]) -> Trace:
    return Trace.from_columns(
        prompt_id=[r[0] for r in rows], step=[r[1] for r in rows], sample=[r[2] for r in rows],
        response_tokens=[len(r[3]) for r in rows], token_ids=[r[3] for r in rows],
    )


def test_copies_found_within_groups_only() -> None:
    tr = trace([
        ("a", 0, 0, (5, 6, 7)), ("a", 0, 1, (5, 6, 8)), ("a", 0, 2, (5, 6, 7)),
        ("a", 0, 3, (5, 6, 7)),
        ("a", 1, 0, (5, 6, 7)),  # the same tokens in another step: not a sibling
        ("b", 0, 0, (5, 6, 8)),  # ... or of another prompt
        ("b", 0, 2, (9,)), ("b", 0, 1, (9,)),  # rows out of sample order
        ("b", 0, 3, (9, 9)),
    ])  # fmt: skip
    c = sibling_copies(tr)
    assert [(x.prompt_id, x.step, x.sample, x.copy_of) for x in c.copies] == [
        ("a", 0, 2, 0), ("a", 0, 3, 0), ("b", 0, 2, 1)]
    assert (c.num_copies, c.num_groups_with_copies, c.num_groups, c.num_responses) == (3, 2, 3, 9)
    d = c.to_dict(max_examples=1)
    assert d["num_copies"] == 3 and d["examples"] == [
        {"prompt_id": "a", "step": 0, "sample": 2, "copy_of": 0, "response_tokens": 3}]


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3), min_size=1, max_size=12))
def test_copies_are_responses_minus_distinct_sequences(seqs: list[list[int]]) -> None:
    tr = trace([("p", 0, i, tuple(s)) for i, s in enumerate(seqs)])
    c = sibling_copies(tr)
    assert c.num_copies == len(seqs) - len({tuple(s) for s in seqs})
    for x in c.copies:  # each names an earlier sibling with the same tokens
        assert x.copy_of < x.sample and seqs[x.copy_of] == seqs[x.sample]


def test_needs_token_ids() -> None:
    with pytest.raises(TraceError, match="no token_ids column"):
        sibling_copies(Trace.from_columns(prompt_id=["a"], response_tokens=[3]))
