"""Replica lifecycle with the stub transport: a failed replica is probed in the background and
re-admitted, a moved replica is followed to its new address, the next step is planned for the
healthy count (the controller re-plans m), and no schedule of failures and recoveries loses or
duplicates a prompt."""

from __future__ import annotations

import asyncio
import dataclasses
import random

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_live_executor import make_plan

from tailsieve.core.protocol import validate_outcome
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_batch import RolloutBatch
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.stub import StubFault, StubTransport

URLS = [f"http://r{i}" for i in range(4)]
FAST = {"backoff_s": 0.001, "request_timeout_s": 2.0, "probe_interval_s": 0.01}


def table(seed: int) -> dict[str, list[int]]:
    rng = random.Random(seed)
    return {
        f"p{i}": [max(1, int(rng.choice([20, 40, 60, 300]) * rng.uniform(0.5, 1.5)))] * 4
        for i in range(600)
    }


def fast(cfg: ExecutorConfig, **kw: object) -> ExecutorConfig:
    return dataclasses.replace(cfg, **{**FAST, **kw})  # type: ignore[arg-type]


def rollout(stub: StubTransport, policy: str = "tailsieve", **kw: object) -> TailSieveRollout:
    cfg = RolloutConfig(
        num_groups=8,
        group_size=4,
        policy=policy,
        model="m",
        sampling=SamplingParams(max_tokens=2000, seed=0),
    )
    ro = TailSieveRollout(URLS, cfg, transport=stub, **kw)  # type: ignore[arg-type]
    ro.executor.config = fast(ro.executor.config)
    return ro


async def recover_at(stub: StubTransport, url: str, at_s: float) -> None:
    await asyncio.sleep(at_s)
    stub.faults[url] = StubFault()


async def test_failed_replica_is_readmitted_mid_step() -> None:
    lengths = {"t0": 300, "p0": 250, "f0": 10, "f1": 20, "f2": 30, "f3": 400, "f4": 500}
    stub = StubTransport(
        lambda p, s: lengths[p] + s, 0.001, faults={"http://r1": StubFault(die_after_s=0.005)}
    )
    ex = LiveExecutor(URLS[:3], fast(ExecutorConfig(model="m")), transport=stub)
    plan = make_plan(["t0"], ["p0"], ["f0", "f1", "f2", "f3", "f4"], cut=3)
    prompts = {a.prompt_id: PromptInput(a.prompt_id, text=a.prompt_id) for a in plan.assignments}
    healer = asyncio.create_task(recover_at(stub, "http://r1", 0.15))
    result = await ex.run(plan, prompts)
    await healer
    validate_outcome(plan, result.outcome)
    assert result.outcome.num_relocated >= 1 and result.outcome.num_regenerated == 0
    assert ex.replicas[1].num_faults == 1
    assert ex.num_readmitted == 1 and ex.healthy == (True, True, True)
    assert "http://r1" in stub.log.health_checks


async def test_moved_replica_followed_to_its_new_address() -> None:
    addresses = list(URLS[:3])
    stub = StubTransport(lambda p, s: 5, 0.001, faults={"http://r1": StubFault(refuse=True)})
    ex = LiveExecutor(
        URLS[:3], fast(ExecutorConfig(model="m")), transport=stub, addresses=lambda: addresses
    )
    assert await ex.probe(only_unhealthy=False) == (True, False, True)
    addresses[1] = "http://r1-restarted/"
    assert await ex.probe() == (True, True, True)
    assert ex.replicas[1].url == "http://r1-restarted" and ex.num_readmitted == 1
    addresses.pop()
    try:
        ex.refresh_addresses()
    except Exception as exc:
        assert "2 addresses for 3 replicas" in str(exc)
    else:
        raise AssertionError("a shorter address list must be refused")


async def test_replica_moved_mid_step_is_not_blamed_for_its_old_server() -> None:
    lengths = {"t0": 300, "p0": 250, "p1": 250, "f0": 10, "f1": 20, "f2": 30, "f3": 400}
    addresses = list(URLS[:3])
    # r1 dies 0.4 s in (stub clock), while pinned p1 (1 s) still runs there; the move below
    # happens on state, before that, however late a loaded event loop runs it
    stub = StubTransport(
        lambda p, s: lengths[p] + s, 0.004, faults={"http://r1": StubFault(die_after_s=0.4)}
    )
    ex = LiveExecutor(
        URLS[:3], fast(ExecutorConfig(model="m")), transport=stub, addresses=lambda: addresses
    )
    plan = make_plan(["t0"], ["p0", "p1"], ["f0", "f1", "f2", "f3"], cut=2)
    prompts = {a.prompt_id: PromptInput(a.prompt_id, text=a.prompt_id) for a in plan.assignments}

    async def move() -> None:  # Ray restarted r1 elsewhere; its old server dies a bit later
        while not any(u == "http://r1" for u, *_ in stub.log.started):  # r1 is working
            await asyncio.sleep(0.001)
        addresses[1] = "http://r1-new"

    mover = asyncio.create_task(move())
    result = await ex.run(plan, prompts)
    await mover
    validate_outcome(plan, result.outcome)
    # pinned p1's responses were on the old r1: they start again on r1 at its new address
    assert result.outcome.num_relocated >= 2 and result.outcome.num_regenerated == 0
    assert result.groups["p1"].replicas == (1, 1)
    assert [u for u, p, _ in stub.log.started if p == "p1"][-2:] == ["http://r1-new"] * 2
    assert ex.replicas[1].url == "http://r1-new" and ex.replicas[1].num_faults == 0
    assert ex.healthy == (True, True, True) and ex.num_readmitted == 1


async def test_next_step_planned_for_the_healthy_replicas() -> None:
    t = table(1)
    stub = StubTransport(lambda p, s: t[p][s], 0.0002)
    source = iter(PromptInput(f"p{i}", text=f"p{i}") for i in range(600))

    async def step(ro: TailSieveRollout) -> RolloutBatch:
        return await ro.step([next(source) for _ in range(ro.num_fresh_needed())])

    async with rollout(stub) as ro:
        for _ in range(3):
            b = await step(ro)
        assert b.metrics.num_planned_replicas == 4
        stub.faults["http://r3"] = StubFault(refuse=True)
        b = await step(ro)  # planned for 4; r3's groups regenerated elsewhere
        assert b.metrics.num_planned_replicas == 4 and all(g.replica != 3 for g in b.groups)
        assert ro.active_replicas == [0, 1, 2]
        b = await step(ro)
        assert b.metrics.num_planned_replicas == 3 and b.metrics.m <= 2
        assert ro.protocol.controller.config.num_replicas == 3  # type: ignore[attr-defined]
        assert all(g.replica != 3 for g in b.groups)
        stub.faults["http://r3"] = StubFault()
        assert await ro.refresh_replicas() == [0, 1, 2, 3]
        b = await step(ro)
        assert b.metrics.num_planned_replicas == 4 and b.metrics.num_readmitted == 1
        assert ro.protocol.controller.config.num_replicas == 4  # type: ignore[attr-defined]


# (replica, dies at s, recovers after s or never) per event
schedule_st = st.lists(
    st.tuples(st.integers(0, 3), st.floats(0.0, 0.08), st.one_of(st.none(), st.floats(0.0, 0.3))),
    max_size=4,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=schedule_st,
    policy=st.sampled_from(["tailsieve", "tailsieve-fixed", "uniform"]),
    seed=st.integers(0, 1000),
)
# every replica down at step 3: the retried step re-plans for the replicas that came back and
# wants more extra groups than the caller was told to feed (it raised ConfigError once)
@example(events=[(0, 0.0, None), (1, 0.0, 0.25), (2, 0.0, 0.25), (3, 0.0, None)],
         policy="tailsieve-fixed", seed=0)
def test_failures_and_recoveries_never_lose_or_duplicate(
    events: list[tuple[int, float, float | None]], policy: str, seed: int
) -> None:
    t = table(seed)
    never = {rep for rep, _, back in events if back is None}
    if len(never) == 4:  # keep one replica that always comes back
        events = [(r, d, b if r != 0 else 0.1) for r, d, b in events]

    async def go() -> None:
        stub = StubTransport(lambda p, s: t[p][s], 0.0001)
        ro = rollout(stub, policy)
        source = [PromptInput(f"p{i}", text=f"p{i}") for i in range(600)]
        drawn: list[str] = []
        delivered: list[str] = []
        healers: list[asyncio.Task[None]] = []
        try:
            await ro.executor.probe(only_unhealthy=False)
            for k in range(5):
                for rep, die_s, back_s in events[k : k + 1]:
                    url = URLS[rep]
                    stub.faults[url] = StubFault(die_after_s=stub._clock() + die_s)
                    if back_s is not None:
                        healers.append(asyncio.create_task(recover_at(stub, url, die_s + back_s)))
                n = ro.num_fresh_needed()
                new, source = source[:n], source[n:]
                drawn += [p.prompt_id for p in new]
                try:
                    b = await ro.step(new)
                except Exception:
                    # every replica down at once: the step fails whole; its prompts are kept
                    await asyncio.gather(*healers)
                    n = ro.num_fresh_needed()  # the healthy count, so the plan, may differ
                    new, source = source[:n], source[n:]
                    drawn += [p.prompt_id for p in new]
                    b = await ro.step(new)
                assert len(b.groups) == 8 and all(len(g.responses) == 4 for g in b.groups)
                delivered += [g.prompt_id for g in b.groups]
            await asyncio.gather(*healers)
            last = await ro.flush()
            if last is not None:
                delivered += [g.prompt_id for g in last.groups]
            queued = [d["prompt_id"] for d in ro.state_dict()["pending"]]
        finally:
            for h in healers:
                h.cancel()
            await ro.aclose()
        assert len(delivered) == len(set(delivered)), "a prompt was delivered twice"
        assert sorted(delivered + queued) == sorted(drawn), "a drawn prompt was lost"

    asyncio.run(go())
