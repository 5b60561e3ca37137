"""The live rebalancer (``runtime.step.rebalancer``) with the stub transport: an imbalanced step makes
moves, and every group is still delivered exactly once, whole, each response token-exact."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_continuation import URLS, assert_exact, ccfg, lengths_fn
from test_live_executor import prompts_for

from tailsieve.core.balancer import BalanceSettings
from tailsieve.core.drain import DrainSettings
from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.core.protocol import validate_outcome
from tailsieve.errors import StepFailedError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.step import live_moves, rebalancer
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.stub import PROMPT_BASE, StubTransport, token_at

warnings.filterwarnings("ignore", message="per-request seeds")

# a batch-bound cost model: one more running response costs 5 ms per iteration
COSTS = ReplicaConfig(
    throughput=ThroughputModel.from_pairs([(1, 0.01), (64, 0.01 + 63 * 0.005)], name="t"),
    recompute_s_per_token=1e-6,
)
BALANCE = BalanceSettings(interval_s=0.01, horizon_s=1.0, seam_s=0.001, expected_step_s=1.0)


def piled_plan(ids: list[str], cut: int | None = None, r: int = 3) -> StepPlan:
    """Every group dealt to replica 0, the others idle: the most imbalanced step. ``cut``
    fresh groups delivered of ``ids`` (None: all pinned)."""
    pin = cut is None
    out = tuple(GroupAssignment(p, Pool.BULK, 0, pin, k) for k, p in enumerate(ids))
    k = len(ids) if cut is None else cut
    return StepPlan(
        step=1, num_replicas=r, group_size=2, num_required=k, q=0, m=0,
        num_extra=len(ids) - k, tail_replicas=(), bulk_replicas=tuple(range(r)),
        assignments=out, num_fresh_to_deliver=0 if pin else k,
        fresh_prompt_ids=() if pin else tuple(ids), is_warmup=False, is_flush=False,
        balance=BALANCE,
    )  # fmt: skip


IDS = [f"g{i}" for i in range(6)]
TABLE = {p: 200 + 40 * i for i, p in enumerate(IDS)}


async def run_piled(stream: bool, cut: int | None, balance: bool = True) -> None:
    length_of = lengths_fn(TABLE)
    stub = StubTransport(length_of, seconds_per_token=0.0005)
    plan = piled_plan(IDS, cut)
    if not balance:
        plan = dataclasses.replace(plan, balance=None)
    ex = LiveExecutor(URLS, ccfg(piece_tokens=32, stream=stream), transport=stub,
                      balance_costs=COSTS)
    res = await ex.run(plan, prompts_for(plan))
    validate_outcome(plan, res.outcome)
    delivered = [d.prompt_id for d in res.outcome.delivered]
    assert len(delivered) == len(set(delivered)) == (len(IDS) if cut is None else cut)
    assert_exact(res, length_of, stub, text=not stream)
    tally = ex.last_moves
    if not balance:
        assert tally.num_moves == 0 and tally.num_checks == 0
        # a step the controller does not balance runs each response as one piece, although
        # the executor's config bounds pieces (they only serve moves)
        assert not stub.log.continued
        assert len(stub.log.started) == len(IDS) * plan.group_size
        return
    assert tally.num_checks >= 1
    assert tally.num_moves >= 1 and ex.num_moves == tally.num_moves
    assert tally.moved_tokens >= tally.prefill_tokens >= 0
    # pieces ran on the idle replicas: the moves reached them
    assert {u for u, *_ in stub.log.continued} & {URLS[1], URLS[2]}


async def test_piled_step_moves_and_delivers_every_group_once_token_exact() -> None:
    await run_piled(stream=False, cut=None)


async def test_piled_step_with_streaming_and_a_cutoff() -> None:
    await run_piled(stream=True, cut=4)


async def test_no_balance_settings_no_moves() -> None:
    await run_piled(stream=False, cut=None, balance=False)


RANDOM_STEPS = {  # hypothesis strategies of ``random_step``'s arguments but the interval
    "lengths": st.lists(st.integers(1, 300), min_size=6, max_size=6),
    "piece": st.sampled_from([None, 16, 50]),
    "stream": st.booleans(),
    "cut": st.sampled_from([None, 1, 3, 6]),
}


def random_step(lengths: list[int], piece: int | None, stream: bool, cut: int | None,
                interval: float) -> LiveExecutor:
    """One piled step with the stub transport, re-balanced every ``interval`` seconds; asserts
    that every group is delivered once, whole, each response token-exact. Returns the
    executor (its ``last_moves``)."""
    length_of = lengths_fn(dict(zip(IDS, lengths, strict=True)))
    stub = StubTransport(length_of, seconds_per_token=0.0003)
    plan = dataclasses.replace(piled_plan(IDS, cut),
                               balance=dataclasses.replace(BALANCE, interval_s=interval))
    ex = LiveExecutor(URLS, ccfg(piece_tokens=piece, stream=stream), transport=stub,
                      balance_costs=COSTS)
    res = asyncio.run(ex.run(plan, prompts_for(plan)))
    validate_outcome(plan, res.outcome)
    delivered = [d.prompt_id for d in res.outcome.delivered]
    assert len(delivered) == len(set(delivered)) == (len(IDS) if cut is None else cut)
    assert_exact(res, length_of, stub, text=not stream)
    return ex


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**RANDOM_STEPS, interval=st.sampled_from([0.002, 0.01]))
def test_rebalanced_steps_keep_exactly_once_whole_groups_exact_chains(
    lengths: list[int], piece: int | None, stream: bool, cut: int | None, interval: float
) -> None:
    random_step(lengths, piece, stream, cut, interval)


async def test_rollout_tailsieve_with_continuation_moves_and_records_them() -> None:
    """``RolloutConfig(policy="tailsieve", continuation=True)``: the controller's balance
    settings switch the live rebalancer on; moves land in ``StepMetrics``; uniform-requests
    makes none."""
    table = {f"p{i}": 20 + (i * 97) % 400 for i in range(400)}
    length_of = lengths_fn(table)
    urls = [f"http://r{i}" for i in range(4)]
    moved = {}
    for policy in ("tailsieve", "uniform-requests"):
        stub = StubTransport(length_of, seconds_per_token=0.0002)
        cfg = RolloutConfig(
            num_groups=8, group_size=2, model="m", policy=policy,
            sampling=SamplingParams(max_tokens=2000, seed=0), continuation=True,
            piece_tokens=40, stream=True, profile="cpu",
            controller={"seam_s": 0.001},  # the stub's time scale: ms per move
        )  # fmt: skip
        source = iter(PromptInput(p, text=p) for p in table)
        async with TailSieveRollout(urls, cfg, transport=stub) as ro:
            n = 0
            for _ in range(5):
                batch = await ro.step([next(source) for _ in range(ro.num_fresh_needed())])
                assert len({g.prompt_id for g in batch.groups}) == len(batch.groups) == 8
                for g in batch.groups:
                    for s, r in enumerate(g.responses):
                        want = length_of(g.prompt_id, s)
                        assert r.token_ids == tuple(token_at(s, j) for j in range(want))
                m = batch.metrics
                assert m.moved_tokens >= m.prefill_tokens >= 0
                n += m.num_moves
        assert stub.log.broken_chains == []
        moved[policy] = n
    assert moved["uniform-requests"] == 0
    assert moved["tailsieve"] >= 1


def test_an_unmovable_response_counts_in_the_load_but_never_moves() -> None:
    """What the rebalancer builds for a response that has not progressed since its last move:
    counted in its replica's load (``num_running``, ``context_tokens``), not a candidate."""
    from tailsieve.core.balancer import ReplicaLoad, plan_moves

    def tau(b: int) -> float:
        return 0.01 + 0.005 * b

    def loads(movable: bool) -> list[ReplicaLoad]:
        cands = tuple((("g", i), 100) for i in range(4) if movable or i > 0)
        return [ReplicaLoad(0, 4, 400.0, lambda: cands, tau, 0.0, 1e-6),
                ReplicaLoad.of(1, (), tau, 0.0, 1e-6)]

    free = plan_moves(loads(True), horizon_s=10.0, seam_s=0.001)
    held = plan_moves(loads(False), horizon_s=10.0, seam_s=0.001)
    assert free and held  # the pile is shed either way
    assert ("g", 0) not in {m.key for m in held}
    assert len(held) == len(free)  # the held response still counts in replica 0's load


async def test_the_drain_asks_the_lpt_rule_live_and_still_delivers_each_group_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the plan's drain has begun (here: from the start), the live rebalancer's checks
    ask ``core.drain_plan.drain_decisions`` (the simulator's LPT rule) instead of the balancer;
    the step still delivers every group once, token-exact."""
    asked: list[int] = []
    real = rebalancer.drain_decisions

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(rebalancer, "drain_decisions", counting)
    length_of = lengths_fn(TABLE)
    for start, expect in ((1.0, True), (0.0, False)):
        asked.clear()
        stub = StubTransport(length_of, seconds_per_token=0.0005)
        drain = DrainSettings(lpt=True, start_fraction=start, lengths=tuple(TABLE.values()))
        plan = dataclasses.replace(piled_plan(IDS, None),
                                   balance=dataclasses.replace(BALANCE, drain=drain))
        ex = LiveExecutor(URLS, ccfg(piece_tokens=32, stream=False), transport=stub,
                          balance_costs=COSTS)
        res = await ex.run(plan, prompts_for(plan))
        validate_outcome(plan, res.outcome)
        assert sorted(d.prompt_id for d in res.outcome.delivered) == sorted(IDS)
        assert_exact(res, length_of, stub, text=True)
        assert bool(asked) is expect
        if expect:
            assert ex.last_moves.num_moves >= 1  # the LPT rule moved work off the piled replica


class _PriorityLog(StubTransport):
    """The stub, recording each request's ``priority`` (None: not sent) and the tokens its
    prompt carries beyond the prompt's own (what the response generated before the piece)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[int | None, int]] = []

    async def post_json(self, url, payload, timeout_s):  # type: ignore[no-untyped-def]
        prompt = payload.get("prompt")
        done = (sum(t < PROMPT_BASE for t in prompt) if isinstance(prompt, list | tuple)
                else 0)  # the stub's prompt ids are PROMPT_BASE + ord(character)
        self.sent.append((payload.get("priority"), done))
        return await super().post_json(url, payload, timeout_s)


async def test_drain_priority_is_sent_with_each_piece_by_tokens_generated() -> None:
    """With the plan's drain priority on, every piece carries the engine priority of its
    response's tokens so far (``engine_priority``: 0 fresh, one level lower per bucket), as
    the simulator submits them; off (the default), no piece carries one (a server without
    ``--scheduling-policy priority`` refuses a priority other than 0)."""
    length_of = lengths_fn(TABLE)
    for on in (True, False):
        stub = _PriorityLog(length_of, seconds_per_token=0.0005)
        drain = DrainSettings(lpt=False, priority=on, priority_bucket_tokens=64,
                              lengths=tuple(TABLE.values()))
        plan = dataclasses.replace(piled_plan(IDS, None),
                                   balance=dataclasses.replace(BALANCE, drain=drain))
        ex = LiveExecutor(URLS, ccfg(piece_tokens=32, stream=False), transport=stub,
                          balance_costs=COSTS)
        res = await ex.run(plan, prompts_for(plan))
        assert_exact(res, length_of, stub, text=True)
        assert len(stub.sent) > len(IDS) * plan.group_size  # continuations were sent
        if on:
            assert all(p == -(done // 64) for p, done in stub.sent)
            assert min(p for p, _ in stub.sent) <= -3  # 200+ tokens in: level -3 or lower
        else:
            assert all(p is None for p, _ in stub.sent)


def test_a_drain_check_lists_every_running_response_in_slices_of_replicas() -> None:
    """The drain reads every running response (not only the costliest replicas'): the live
    rebalancer lists them ``LIST_REPLICAS`` replicas per slice of reading the loads, before
    its first decision, and the planner finds each listed with its prompt tokens."""
    from tailsieve.core.running_index import RunningIndex

    idx = RunningIndex()
    num = rebalancer.LIST_REPLICAS + 4
    for r in range(num):
        for j in range(3 if r else 12):  # replica 0 piled: the drain moves work off it
            idx.add((f"p{r}", j), r, 100 + 1000 * j, 100, (r,))

    class _Mover:
        def running_index(self) -> RunningIndex:
            return idx

        def running_responses(self) -> list[live_moves.LiveResponse]:
            return []

        def move(self, prompt_id: str, sample: int, to_replica: int) -> bool:
            idx.set_replica((prompt_id, sample), to_replica)
            return True

    drain = DrainSettings(start_fraction=1.0, lengths=(200, 500, 3000, 16_000) * 10)

    def make() -> rebalancer.LiveRebalancer:
        return rebalancer.LiveRebalancer(
            _Mover(), dataclasses.replace(BALANCE, drain=drain), [COSTS] * num,
            lambda: [True] * num, lambda: 1.0)

    rb = make()
    rb.num_launched = len(idx.entries)  # all still running: the drain has begun
    made = asyncio.run(rb.check_async())
    assert len(rb.tally.loads_cpu_s) == 1 + 2  # the index read, then two listing slices
    assert set(rb._prompts) == set(idx.entries) and set(rb._prompts.values()) == {100}
    assert made >= 1 and rb.tally.num_moves == made
    unset = make()  # no launch count (the executor sets it): no drain to begin
    asyncio.run(unset.check_async())
    assert not unset._prompts and len(unset.tally.loads_cpu_s) == 1


async def _emulated_priority_step(policy: str) -> tuple[int, ...]:
    """A piled step with drain priority on (16 tokens a level, pieces of 16) against three
    in-process emulated vLLM replicas under ``--scheduling-policy policy``; the delivered
    response lengths."""
    ecfg = dataclasses.replace(
        EmulatorConfig.from_profile("cpu", time_scale=0.002, model_name="m"),
        scheduling_policy=policy)
    drain = DrainSettings(lpt=False, priority=True, priority_bucket_tokens=16,
                          lengths=(100,) * 8)
    plan = dataclasses.replace(piled_plan(IDS, None),
                               balance=dataclasses.replace(BALANCE, drain=drain))
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(EmulatorServer(ecfg)) for _ in range(3)]
        ex = LiveExecutor([s.url for s in servers], ccfg(piece_tokens=16, stream=False),
                          balance_costs=COSTS)
        stack.push_async_callback(ex.aclose)
        res = await ex.run(plan, prompts_for(plan))
    validate_outcome(plan, res.outcome)
    return tuple(n for g in res.outcome.delivered for n in g.response_tokens)


async def test_drain_priority_reaches_emulated_vllm_over_http() -> None:
    """Over HTTP: a priority-policy server runs the step (continuations carry levels below
    0), and an FCFS one refuses it (vLLM's HTTP 400 for a priority other than 0), so the
    field is on the wire."""
    lengths = await _emulated_priority_step("priority")
    assert len(lengths) == len(IDS) * 2 and max(lengths) > 32  # pieces at levels -1, -2, ...
    with pytest.raises(StepFailedError, match=r"[Pp]riority"):
        await _emulated_priority_step("fcfs")
