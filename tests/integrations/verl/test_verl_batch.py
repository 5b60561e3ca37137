"""``build_output`` layout invariants for any group shapes (hypothesis), with verl's real
``DataProto``: padding sides, masks matching token counts, log-probs on response tokens only,
each row's own fields, and an over-long response named as a replica error."""

from __future__ import annotations

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

from fit_steps import check_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.pool import Pool
from tailsieve.errors import ReplicaError
from tailsieve.integrations.verl.batch import PromptRow, build_output
from tailsieve.runtime.engine.backends import Response
from tailsieve.runtime.step.step_state import GroupResponses

P, R, PAD = 12, 10, 0


def response(k: int) -> Response:
    return Response(
        "x" * k, k, "stop", tuple(range(3, 3 + k)), tuple(-0.1 * (i + 1) for i in range(k))
    )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, P), st.lists(st.integers(1, R), min_size=1, max_size=4)),
        min_size=1,
        max_size=6,
    )
)
def test_layout(shapes: list[tuple[int, list[int]]]) -> None:
    rows, groups = {}, []
    for g, (plen, lens) in enumerate(shapes):
        uid = f"u{g}"
        rows[uid] = PromptRow(
            uid, tuple(range(100, 100 + plen)), {"uid": uid, "extra_info": {"g": g}}
        )
        groups.append(GroupResponses(uid, tuple(response(k) for k in lens), Pool.BULK, 0, 0, 0.0))
    out = build_output(groups, rows, P, R, PAD)
    check_rows(out, P, R, PAD)
    j = 0
    for g, (plen, lens) in enumerate(shapes):
        for k in lens:
            assert int(out.batch["attention_mask"][j, :P].sum()) == plen
            assert int(out.batch["response_mask"][j].sum()) == k
            assert out.non_tensor_batch["uid"][j] == f"u{g}"
            assert out.non_tensor_batch["extra_info"][j] == {"g": g}
            j += 1
    assert j == len(out)


def test_too_long_response_is_a_replica_error() -> None:
    rows = {"u": PromptRow("u", (1, 2), {})}
    groups = [GroupResponses("u", (response(R + 1),), Pool.BULK, 0, 0, 0.0)]
    with pytest.raises(ReplicaError, match="cap"):
        build_output(groups, rows, P, R, PAD)
