"""Live executor semantics with the stub transport: cutoff, aborts, pinned groups, faults."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.core.protocol import validate_outcome
from tailsieve.errors import StepFailedError
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.step_state import StepProgress
from tailsieve.runtime.stub import StubFault, StubTransport

URLS = ["http://r0", "http://r1", "http://r2"]


def make_plan(
    tail: list[str], pinned: list[str], fresh: list[str], cut: int, m: int = 1, r: int = 3
) -> StepPlan:
    tail_r = tuple(range(r - m, r))
    bulk_r = tuple(range(r - m))
    orders = [0] * r
    out: list[GroupAssignment] = []

    def deal(ids: list[str], pool: Pool, reps: tuple[int, ...], pin: bool, k: int) -> int:
        for pid in ids:
            rep = reps[k % len(reps)]
            out.append(GroupAssignment(pid, pool, rep, pin, orders[rep]))
            orders[rep] += 1
            k += 1
        return k

    deal(tail, Pool.TAIL, tail_r, True, 0)
    k = deal(pinned, Pool.BULK, bulk_r, True, 0)
    deal(fresh, Pool.BULK, bulk_r, False, k)
    return StepPlan(
        step=1,
        num_replicas=r,
        group_size=2,
        num_required=len(tail) + len(pinned) + cut,
        q=len(tail),
        m=m,
        num_extra=len(fresh) - cut,
        tail_replicas=tail_r,
        bulk_replicas=bulk_r,
        assignments=tuple(out),
        num_fresh_to_deliver=cut,
        fresh_prompt_ids=tuple(fresh),
        is_warmup=False,
        is_flush=False,
    )


LENGTHS = {"t0": 300, "p0": 250, "f0": 10, "f1": 20, "f2": 30, "f3": 400, "f4": 500}


def length_of(prompt: str, sample: int) -> int:
    return LENGTHS[prompt] + sample


def prompts_for(plan: StepPlan) -> dict[str, PromptInput]:
    return {a.prompt_id: PromptInput(a.prompt_id, text=a.prompt_id) for a in plan.assignments}


def cfg(**kw: object) -> ExecutorConfig:
    base: dict[str, object] = dict(
        model="m", sampling=SamplingParams(max_tokens=1000, seed=0), backoff_s=0.001
    )
    base.update(kw)
    return ExecutorConfig(**base)  # type: ignore[arg-type]


PLAN = make_plan(["t0"], ["p0"], ["f0", "f1", "f2", "f3", "f4"], cut=3)


async def test_cutoff_aborts_the_rest_and_waits_for_pinned() -> None:
    stub = StubTransport(length_of, seconds_per_token=0.0005)
    ex = LiveExecutor(URLS, cfg(), transport=stub)
    res = await ex.run(PLAN, prompts_for(PLAN))
    out = res.outcome
    validate_outcome(PLAN, out)
    assert set(out.delivered_ids) == {"t0", "p0", "f0", "f1", "f2"}
    assert {g.prompt_id for g in out.aborted} == {"f3", "f4"}
    # the aborted groups' requests were cancelled (connections closed), never completed
    cancelled = {p for _, p in stub.log.cancelled}
    assert cancelled == {"f3", "f4"}
    assert not any(p in ("f3", "f4") for _, p in stub.log.completed)
    # responses are returned with exact per-response token counts
    g = res.groups["t0"]
    assert [r.num_tokens for r in g.responses] == [300, 301]
    assert res.groups["f1"].responses[1].text == "f1:1"
    assert out.bulk_cut_s >= max(r.completion_s for r in out.delivered if r.prompt_id == "p0")
    # the tail pool's time is its group's completion (301 tokens x 0.5 ms at the least)
    assert out.tail_time_s >= 301 * 0.0005
    assert out.tail_time_s == pytest.approx(
        max(r.completion_s for r in out.delivered if r.prompt_id == "t0"))
    assert out.makespan_s == max(out.tail_time_s, out.bulk_cut_s)
    assert out.aborted[0].tokens_so_far == -1


async def test_split_groups_report_finished_responses_at_abort() -> None:
    # c's first response ends well before the cutoff (a tie at 5 tokens raced under load)
    lengths = {"a": (20, 20), "b": (20, 20), "c": (5, 2000)}
    stub = StubTransport(lambda p, s: lengths[p][s], seconds_per_token=0.0005)
    plan = make_plan([], [], ["a", "b", "c"], cut=2, m=0, r=1)
    res = await LiveExecutor(["http://r0"], cfg(), transport=stub).run(plan, prompts_for(plan))
    (ab,) = res.outcome.aborted
    assert ab.prompt_id == "c" and ab.num_finished == 1 and ab.finished_tokens == 5
    # c's unfinished response ran until the cutoff (a and b done: ~20 tokens' time); not
    # streamed, so its tokens are estimated at the observed rate (runtime.step.waste)
    assert ab.wasted_tokens == 5 + ab.estimated_tokens
    assert ab.estimated_tokens == pytest.approx(20, rel=0.6)
    assert res.outcome.estimated_wasted_tokens == ab.estimated_tokens


async def test_one_request_per_group_mode() -> None:
    stub = StubTransport(length_of, seconds_per_token=0.0002)
    ex = LiveExecutor(URLS, cfg(split_groups=False), transport=stub)
    res = await ex.run(PLAN, prompts_for(PLAN))
    validate_outcome(PLAN, res.outcome)
    assert len(stub.log.started) == len(PLAN.assignments)


async def test_streaming_counts_tokens_so_far() -> None:
    stub = StubTransport(length_of, seconds_per_token=0.0002)
    ex = LiveExecutor(URLS, cfg(stream=True), transport=stub)
    res = await ex.run(PLAN, prompts_for(PLAN))
    validate_outcome(PLAN, res.outcome)
    assert res.outcome.delivered[0].response_tokens == (300, 301)


async def test_replay_forces_lengths() -> None:
    stub = StubTransport(length_of, seconds_per_token=0.0001)
    ex = LiveExecutor(URLS, cfg(), transport=stub, forced_length=lambda p, s: 7 + s)
    res = await ex.run(PLAN, prompts_for(PLAN))
    assert all(r.response_tokens == (7, 8) for r in res.outcome.delivered)
    assert all(r.finish_reasons == ("length", "length") for r in res.outcome.delivered)


@pytest.mark.parametrize(
    "fault",
    [StubFault(refuse=True), StubFault(die_after_s=0.05), StubFault(hang=True)],
    ids=["refuse", "die-mid-step", "timeout"],
)
async def test_replica_fault_restarts_its_responses_elsewhere(fault: StubFault) -> None:
    stub = StubTransport(length_of, seconds_per_token=0.0005, faults={"http://r0": fault})
    # only the hung replica needs the request timeout; 5 s is 30x a healthy request here, so a
    # loaded machine does not time out the others. A hung server still answers /health, so no
    # mid-step probe may re-admit it before the step ends (the last lines probe it by hand)
    ex = LiveExecutor(URLS, cfg(request_timeout_s=5.0 if fault.hang else None,
                                probe_interval_s=3600.0), transport=stub)
    res = await ex.run(PLAN, prompts_for(PLAN))
    out = res.outcome
    validate_outcome(PLAN, out)
    assert ex.healthy == (False, True, True)
    assert out.num_relocated >= 1 and out.num_regenerated == 0
    assert all(g.attempt == 0 for g in out.delivered)  # no group started again whole
    # only responses that replica 0 completed before the fault may come from it (by state:
    # the stub completed them; a request in flight at the fault fails)
    done_on_r0 = Counter(p for u, p in stub.log.completed if u == "http://r0")
    dealt = {a.prompt_id: a.replica for a in PLAN.assignments}
    on_r0 = Counter(p for p, g in res.groups.items() for r in g.replicas if r == 0)
    assert all(done_on_r0[p] >= k for p, k in on_r0.items())
    moved = [r for p, g in res.groups.items() for r in g.replicas if r != dealt[p]]
    assert moved and set(moved) == {1}  # same (bulk) pool preferred
    # probing brings a replica back only when /health answers
    stub.faults.pop("http://r0")
    assert await ex.probe() == (True, True, True)


async def test_one_request_group_restarts_whole_elsewhere() -> None:
    """A group sent as one request with n (``split_groups=False``) whose replica dies starts
    again as one request on another replica: a new attempt of the group."""
    stub = StubTransport(length_of, 0.0005, faults={"http://r0": StubFault(die_after_s=0.05)})
    ex = LiveExecutor(URLS, cfg(split_groups=False), transport=stub)
    res = await ex.run(PLAN, prompts_for(PLAN))
    out = res.outcome
    validate_outcome(PLAN, out)
    again = [g for g in out.delivered if g.attempt > 0]
    assert again and out.num_regenerated == len(again) and out.num_relocated == 0
    assert all(res.groups[g.prompt_id].replicas == (1, 1) for g in again)
    assert len(stub.log.started) == len(PLAN.assignments) + len(again)  # one request each


async def test_tail_replica_death_moves_to_bulk_pool() -> None:
    stub = StubTransport(length_of, 0.0005, faults={"http://r2": StubFault(die_after_s=0.02)})
    ex = LiveExecutor(URLS, cfg(), transport=stub)
    res = await ex.run(PLAN, prompts_for(PLAN))
    validate_outcome(PLAN, res.outcome)
    t0 = res.groups["t0"]
    assert t0.pool is Pool.TAIL and set(t0.replicas) <= {0, 1} and t0.attempt == 0
    assert res.outcome.num_relocated == 2


async def test_request_errors_retry_then_succeed() -> None:
    stub = StubTransport(
        length_of, 0.0001, faults={"http://r0": StubFault(num_http_500=2, num_malformed=1)}
    )
    res = await LiveExecutor(URLS, cfg(), transport=stub).run(PLAN, prompts_for(PLAN))
    validate_outcome(PLAN, res.outcome)
    assert res.outcome.num_regenerated == 0


async def test_retries_exhausted_fail_the_step_loudly() -> None:
    stub = StubTransport(length_of, 0.0001, faults={"http://r1": StubFault(num_http_500=50)})
    ex = LiveExecutor(URLS, cfg(max_retries=2), transport=stub)
    with pytest.raises(StepFailedError, match=r"replica 1 \(http://r1\).*HTTP 500"):
        await ex.run(PLAN, prompts_for(PLAN))
    # nothing left running after the failure
    assert all(
        (u, p) in stub.log.completed or (u, p) in stub.log.cancelled or u == "http://r1"
        for u, p, _ in stub.log.started
    )


async def test_http_400_is_not_retried() -> None:
    stub = StubTransport(length_of, 0.0001, faults={"http://r2": StubFault(num_http_400=1)})
    with pytest.raises(StepFailedError, match="prompt 't0'"):
        await LiveExecutor(URLS, cfg(), transport=stub).run(PLAN, prompts_for(PLAN))


async def test_all_replicas_down_fails() -> None:
    faults = {u: StubFault(refuse=True) for u in URLS}
    stub = StubTransport(length_of, 0.0001, faults=faults)
    with pytest.raises(StepFailedError, match="no healthy replica"):
        await LiveExecutor(URLS, cfg(), transport=stub).run(PLAN, prompts_for(PLAN))


def spread_plan() -> StepPlan:
    """PLAN with every group's two responses on two different bulk replicas (tail: r2)."""
    out = []
    for a in PLAN.assignments:
        where = (a.replica, a.replica) if a.pool is Pool.TAIL else (a.replica, 1 - a.replica)
        out.append(GroupAssignment(a.prompt_id, a.pool, a.replica, a.pinned, a.order,
                                   where if a.pool is Pool.BULK else ()))
    return StepPlan(**{**{f: getattr(PLAN, f) for f in PLAN.__slots__},  # type: ignore[arg-type]
                       "assignments": tuple(out)})


async def test_spread_group_sends_each_response_to_its_replica() -> None:
    plan = spread_plan()
    stub = StubTransport(length_of, seconds_per_token=0.0005)
    ex = LiveExecutor(URLS, cfg(split_groups=False), transport=stub)
    res = await ex.run(plan, prompts_for(plan))
    validate_outcome(plan, res.outcome)
    urls = {(u, p) for u, p, _ in stub.log.started}
    for a in plan.assignments:
        want = {URLS[r] for r in a.response_replicas(2)}
        assert {u for u, p in urls if p == a.prompt_id} == want
    assert len(res.outcome.aborted) == 2


async def test_spread_group_response_restarts_when_its_replica_dies() -> None:
    plan = spread_plan()
    stub = StubTransport(length_of, 0.0005, faults={"http://r1": StubFault(die_after_s=0.02)})
    ex = LiveExecutor(URLS, cfg(), transport=stub)
    res = await ex.run(plan, prompts_for(plan))
    validate_outcome(plan, res.outcome)
    assert ex.healthy == (True, False, True)
    assert res.outcome.num_relocated >= 1 and res.outcome.num_regenerated == 0
    moved = {p for p, g in res.groups.items()
             for r, d in zip(g.replicas, next(a for a in plan.assignments
                                              if a.prompt_id == p).response_replicas(2),
                             strict=True) if r != d}
    assert moved
    for p in moved:  # the response on r0 ran once; the one on r1 started again on r0
        starts = [u for u, q, _ in stub.log.started if q == p]
        assert starts.count("http://r0") == 2 and starts[-1] != "http://r1"


async def test_failed_request_names_the_replica_that_answered_it() -> None:
    """A spread group's response on r1 fails (HTTP 400): the error names replica 1 and r1's
    URL, not the group's home replica paired with another replica's URL."""
    plan = spread_plan()
    stub = StubTransport(length_of, 0.0005, faults={"http://r1": StubFault(num_http_400=1000)})
    with pytest.raises(StepFailedError) as err:
        await LiveExecutor(URLS, cfg(), transport=stub).run(plan, prompts_for(plan))
    m = re.search(r"on replica (\d) \((\S+)\) failed: (\S+)/v1/completions", str(err.value))
    assert m is not None, str(err.value)
    assert URLS[int(m[1])] == m[2] == m[3] == "http://r1"


async def test_a_replica_taken_out_is_reported_before_any_group_ends_after_it() -> None:
    """``on_progress`` shows a dead replica as unhealthy when its responses are relocated,
    not only at the next group's end."""
    seen: list[StepProgress] = []
    stub = StubTransport(length_of, 0.0005, faults={"http://r2": StubFault(die_after_s=0.02)})
    ex = LiveExecutor(URLS, cfg(), transport=stub, on_progress=seen.append)
    res = await ex.run(PLAN, prompts_for(PLAN))
    assert res.outcome.num_relocated == 2
    down = next(i for i, p in enumerate(seen) if not p.healthy[2])
    done = [p.num_tail_done + p.num_bulk_done for p in seen]
    assert down == 0 or done[down] == done[down - 1]  # reported with no group ending
