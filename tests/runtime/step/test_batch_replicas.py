"""Batch files record the replica each response actually ran on (the delivered attempt's), not
its group's home replica: spread groups, groups moved off a dead replica, and a fleet that
shrank (executor indices, as in the launch state file)."""

from __future__ import annotations

import json

from test_live_executor import URLS, cfg, length_of, prompts_for, spread_plan
from test_replica_lifecycle import URLS as URLS4
from test_replica_lifecycle import rollout, table

from tailsieve.core.protocol import validate_outcome
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.stub import StubFault, StubLog, StubTransport


def last_url(log: StubLog, prompt: str, seed: int) -> str:
    """Where the last request of response ``seed`` (base seed 0 + sample) of ``prompt`` went."""
    return [u for u, p, s in log.started if p == prompt and s == seed][-1]


async def test_spread_and_moved_groups_record_each_responses_replica() -> None:
    plan = spread_plan()  # bulk groups: response 0 on the home replica, response 1 on the other
    stub = StubTransport(length_of, 0.0005, faults={"http://r1": StubFault(die_after_s=0.02)})
    res = await LiveExecutor(URLS, cfg(), transport=stub).run(plan, prompts_for(plan))
    validate_outcome(plan, res.outcome)
    by_id = {a.prompt_id: a for a in plan.assignments}
    spread = moved = 0
    for pid, g in res.groups.items():
        assert len(g.replicas) == len(g.responses) == 2
        for i in range(2):
            assert URLS[g.response_replica(i)] == last_url(stub.log, pid, i)
        for r, dealt in zip(g.replicas, by_id[pid].response_replicas(2), strict=True):
            if r != dealt:  # moved off the dead replica
                assert dealt == 1 and r != 1
                moved += 1
        spread += len(set(g.replicas)) > 1
    assert spread >= 1 and moved >= 1


async def test_rows_name_the_replica_after_the_fleet_shrank() -> None:
    t = table(3)
    stub = StubTransport(lambda p, s: t[p][s], 0.0002)
    source = iter(PromptInput(f"p{i}", text=f"p{i}") for i in range(600))
    async with rollout(stub) as ro:
        await ro.step([next(source) for _ in range(ro.num_fresh_needed())])
        stub.faults["http://r0"] = StubFault(refuse=True)
        await ro.step([next(source) for _ in range(ro.num_fresh_needed())])
        assert ro.active_replicas == [1, 2, 3]
        stub.log.started.clear()
        b = await ro.step([next(source) for _ in range(ro.num_fresh_needed())])
    rows = [json.loads(json.dumps(r)) for r in b.rows()]
    assert rows and {r["replica"] for r in rows} <= {1, 2, 3}
    assert len({r["replica"] for r in rows}) >= 2
    for r in rows:  # executor indices: r1..r3, never the planned index
        assert URLS4[r["replica"]] == last_url(stub.log, r["prompt_id"], r["sample"])
        assert r["home_replica"] in {1, 2, 3}
    # spread groups: the home replica alone would misname these rows
    assert any(r["replica"] != r["home_replica"] for r in rows)
