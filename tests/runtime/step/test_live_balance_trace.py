"""The live rebalancer records every check as the simulator does, counts the moves that took
effect, and checks at each response completion."""

from __future__ import annotations

import asyncio
import dataclasses

from test_continuation import URLS, ccfg, lengths_fn
from test_live_executor import prompts_for
from test_live_rebalance import BALANCE, COSTS, IDS, TABLE, piled_plan

from tailsieve.core.balance_trace import DEFERRED, REFUSED
from tailsieve.core.running_index import RunningIndex
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.stub import StubTransport


def test_a_live_step_records_its_checks_and_the_moves_that_took_effect() -> None:
    length_of = lengths_fn(TABLE)
    stub = StubTransport(length_of, seconds_per_token=0.0005)
    plan = dataclasses.replace(piled_plan(IDS), balance=BALANCE)
    ex = LiveExecutor(URLS, ccfg(piece_tokens=32, stream=False), transport=stub,
                      balance_costs=COSTS)
    asyncio.run(ex.run(plan, prompts_for(plan)))
    tally, trace = ex.last_moves, ex.last_trace
    assert len(trace.checks) == tally.num_checks >= 1
    assert trace.num_made == tally.num_moves >= 1
    # a vLLM piece moves at its end: every move asked for takes effect once (a response asked
    # to move again before its piece ended counts once), and only moves take effect
    assert 1 <= trace.num_effective == tally.num_effective <= tally.num_moves
    first = trace.checks[0]
    assert sum(first.num_running) == len(IDS) * plan.group_size  # every response, piled
    assert all(c.t_s >= 0 for c in trace.checks)
    # each move as the simulator records it: its candidate, gain and decision (unstreamed
    # vLLM pieces: deferred to the piece's end), and when it took effect
    moves = trace.moves
    assert {m.decision for m in moves} <= {DEFERRED, REFUSED} and DEFERRED in {
        m.decision for m in moves}
    assert all(m.response[0] in IDS and m.src != m.dst and m.gain_s > 0 for m in moves)
    took = [m for m in moves if m.effective_s is not None]
    assert len(took) == trace.num_effective
    for m in took:
        made_at = next(c.t_s for c in trace.checks if m in c.moves)
        assert m.made and m.effective_s >= made_at


def test_a_response_completion_tells_the_index_listener() -> None:
    calls: list[int] = []
    idx = RunningIndex(on_complete=lambda: calls.append(1))
    idx.add(("p", 0), 0, 10, 5, (0,))
    idx.add(("p", 1), 0, 10, 5, (0,))
    idx.remove(("p", 1))  # stopped (cut, moved away by a fault): not a completion
    idx.completed(("p", 0))
    idx.completed(("p", 0))  # no longer indexed: nothing
    assert calls == [1]
    assert idx.get(("p", 0)) is None
