"""The Python API over the stub transport: batches, carried prompts, checkpoints, flush, and a
property test that random fault schedules never lose or duplicate a prompt."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailsieve.errors import StepFailedError
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.stub import StubFault, StubTransport

URLS = [f"http://r{i}" for i in range(4)]


def lengths(seed: int = 0) -> dict[str, list[int]]:
    rng = random.Random(seed)
    out = {}
    for i in range(400):
        base = rng.choice([20, 40, 60, 400]) if i % 7 else 900
        out[f"p{i}"] = [max(1, int(base * rng.uniform(0.5, 1.5))) for _ in range(4)]
    return out


def make(stub: StubTransport, policy: str = "tailsieve", **kw: object) -> TailSieveRollout:
    cfg = RolloutConfig(
        num_groups=8,
        group_size=4,
        policy=policy,
        model="m",
        sampling=SamplingParams(max_tokens=2000, seed=0),
        **kw,  # type: ignore[arg-type]
    )
    ro = TailSieveRollout(URLS, cfg, transport=stub)
    ro.executor.config = type(ro.executor.config)(
        **{
            **{f: getattr(ro.executor.config, f) for f in ro.executor.config.__dataclass_fields__},
            "backoff_s": 0.001,
            "request_timeout_s": 2.0,
        }
    )
    return ro


def feeder(n: int = 400) -> list[PromptInput]:
    return [PromptInput(f"p{i}", text=f"p{i}") for i in range(n)]


async def run_steps(ro: TailSieveRollout, num_steps: int) -> tuple[list[list[str]], list[str]]:
    source = feeder()
    drawn: list[str] = []
    drawn_at: dict[str, int] = {}
    batches: list[list[str]] = []
    for _ in range(num_steps):
        k = ro.num_fresh_needed()
        new, source = source[:k], source[k:]
        drawn += [p.prompt_id for p in new]
        drawn_at.update((p.prompt_id, len(batches)) for p in new)
        batch = await ro.step(new)
        assert len(batch.groups) == 8
        assert all(len(g.responses) == 4 for g in batch.groups)
        batches.append([g.prompt_id for g in batch.groups])
    last = await ro.flush()
    if last is not None:
        batches.append([g.prompt_id for g in last.groups])
    assert ro.num_carried == 0
    for i, b in enumerate(batches):  # delivered at most one step after it was drawn
        assert all(0 <= i - drawn_at[p] <= 1 for p in b)
    return batches, drawn


def check_exactly_once(batches: list[list[str]], drawn: list[str]) -> None:
    flat = [p for b in batches for p in b]
    assert len(flat) == len(set(flat)), "a prompt was delivered twice"
    assert sorted(flat) == sorted(drawn), "a drawn prompt was lost"


async def test_tailsieve_steps_deliver_every_prompt_once() -> None:
    table = lengths()
    stub = StubTransport(lambda p, s: table[p][s], seconds_per_token=0.0002)
    async with make(stub) as ro:
        batches, drawn = await run_steps(ro, 6)
    check_exactly_once(batches, drawn)
    assert ro.protocol.step >= 6


async def test_state_dict_round_trip_resumes_identically() -> None:
    table = lengths()
    stub = StubTransport(lambda p, s: table[p][s], seconds_per_token=0.0002)
    async with make(stub, controller={"m0": 1}) as ro:  # isolate: the warm-up step carries
        await ro.step(feeder()[: ro.num_fresh_needed()])
        state = json.loads(json.dumps(ro.state_dict()))
        assert state["carried"]  # the warm-up step carries its aborted prompts
    async with make(stub, controller={"m0": 1}) as ro2:
        ro2.load_state_dict(state)
        assert ro2.state_dict() == state
        assert ro2.num_carried == len(state["carried"])
        batch = await ro2.flush()
        assert batch is not None
        assert {g.prompt_id for g in batch.groups} == {d["prompt_id"] for d in state["carried"]}


async def test_step_needs_enough_prompts() -> None:
    stub = StubTransport(lambda p, s: 5)
    async with make(stub) as ro:
        with pytest.raises(Exception, match=r"needs \d+ fresh prompts"):
            await ro.step(feeder()[:2])


async def test_failed_step_keeps_prompts() -> None:
    table = lengths()
    stub = StubTransport(
        lambda p, s: table[p][s], 0.0001, faults={u: StubFault(num_http_500=100) for u in URLS}
    )
    async with make(stub, policy="uniform") as ro:
        with pytest.raises(StepFailedError):
            await ro.step(feeder()[:8])
        assert ro.num_pending == 8 and ro.num_fresh_needed() == 0
        for u in URLS:
            stub.faults[u].num_http_500 = 0
        batch = await ro.step()
        assert [g.prompt_id for g in batch.groups] == [f"p{i}" for i in range(8)]


fault_st = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.sampled_from(["die", "refuse", "hang", "http500"]),
        st.floats(0.0, 0.05),
    ),
    max_size=3,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    faults=fault_st,
    policy=st.sampled_from(["tailsieve", "tailsieve-fixed", "uniform"]),
    seed=st.integers(0, 1000),
)
def test_random_fault_schedules_never_lose_or_duplicate(
    faults: list[tuple[int, str, float]], policy: str, seed: int
) -> None:
    table = lengths(seed)
    script: dict[str, StubFault] = {}
    for rep, kind, at in faults:
        if len(script) >= 3:  # keep one replica alive
            break
        f = script.setdefault(URLS[rep], StubFault())
        if kind == "die":
            f.die_after_s = at
        elif kind == "refuse":
            f.refuse = True
        elif kind == "hang":
            f.hang = True
        else:
            f.num_http_500 = 2
    if len(script) == 4:
        script.pop(URLS[0])

    async def go() -> None:
        stub = StubTransport(lambda p, s: table[p][s], 0.0001, faults=script)
        ro = make(stub, policy=policy)
        ro.executor.config = type(ro.executor.config)(
            **{
                **{
                    f: getattr(ro.executor.config, f)
                    for f in ro.executor.config.__dataclass_fields__
                },
                "request_timeout_s": 0.3,
            }
        )
        try:
            batches, drawn = await run_steps(ro, 4)
        finally:
            await ro.aclose()
        check_exactly_once(batches, drawn)
        for b in batches[:-1]:
            assert len(b) == 8

    asyncio.run(go())
