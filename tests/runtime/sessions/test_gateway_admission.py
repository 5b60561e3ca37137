"""The gateway's admission by KV room (``runtime.sessions.admit``): a new session waits until a
replica has room, in arrival order; a session ends by ``end_session`` or a lapsed tool wait;
nothing is lost, generated twice or waits for ever."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.balancer import BalanceSettings
from tailsieve.errors import ConfigError
from tailsieve.runtime.sessions import GatewayConfig, SessionGateway
from tailsieve.runtime.sessions.admit import LiveAdmission
from tailsieve.runtime.sessions.parts import GatewayParts, replica_configs
from tailsieve.runtime.stub import StubModel, StubPieceRunner
from tailsieve.session.admission import KvReading, StepShape
from tailsieve.session.book import SessionBook
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.routers import make_router
from tailsieve.session.tool_wait import ToolWaitHorizon, ToolWaitSettings
from tailsieve.session.turn import TurnRequest

POLICIES = ["tailsieve", "verl-sticky", "affinity-margin", "cache-aware"]


def small_kv_parts(cfg: GatewayConfig, num_replicas: int, kv_tokens: int) -> GatewayParts:
    """The gateway's parts with every replica's KV budget ``kv_tokens``."""
    configs = tuple(replace(c, kv_capacity_tokens=kv_tokens)
                    for c in replica_configs(cfg, num_replicas))
    book = SessionBook(configs, PrefixCacheModel([kv_tokens] * num_replicas))
    book.tool_waits = ToolWaitHorizon(ToolWaitSettings(prior_s=0.05, cap_s=0.05))
    kw = {"expected_turn_tokens": lambda: book.expected_turn_tokens or None} \
        if cfg.policy.value == "tailsieve" else {}
    router = make_router(cfg.policy, cfg.settings, np.random.default_rng(0), **kw)
    return GatewayParts(router, book, configs)


async def scenario(num_replicas: int, kv_tokens: int, sessions: list[tuple[int, int, bool]],
                   policy: str, seed: int) -> None:
    """``sessions``: (start delay in ms, turns, ends by ``end_session`` else by a lapse)."""
    rnd = random.Random(seed)
    runner = StubPieceRunner(num_replicas, StubModel(eos_every=37), seconds_per_token=0.0001)
    cfg = GatewayConfig(policy=policy, kv_admission="on", probe_interval_s=0.01,
                        balance=BalanceSettings(interval_s=0.003, horizon_s=30.0, seam_s=0.0),
                        profile="qwen3-4b-h100")
    gw = SessionGateway(num_replicas, runner, cfg, small_kv_parts(cfg, num_replicas, kv_tokens))
    delivered: dict[tuple[str, int], tuple[int, ...]] = {}
    prompts: dict[tuple[str, int], list[int]] = {}
    first_placed: list[str] = []
    adm = gw.admission
    placed = adm.placed

    seen: set[object] = set()

    def check_placed(session_id: object, replica: int, context_tokens: int) -> None:
        kv = adm.kv
        assert kv is not None
        if session_id not in seen:  # a new session goes only where it fits, or alone
            seen.add(session_id)
            assert kv.fits(replica, context_tokens)
        placed(session_id, replica, context_tokens)
    adm.placed = check_placed  # type: ignore[method-assign]

    async def session(i: int, delay_ms: int, num_turns: int, announced: bool) -> None:
        await asyncio.sleep(delay_ms / 1000)
        sid = f"s{i}"
        ctx = [rnd.randrange(1, 999) for _ in range(rnd.randrange(8, 60))]
        for t in range(num_turns):
            prompts[(sid, t)] = list(ctx)
            out = await gw.generate(sid, f"g{i % 2}", ctx, {"max_tokens": 60})
            if t == 0:
                first_placed.append(sid)
            assert (sid, t) not in delivered
            delivered[(sid, t)] = out.token_ids
            ctx = [*ctx, *out.token_ids, *(rnd.randrange(1, 999) for _ in range(5))]
        if announced:
            gw.end_session(sid)

    async with gw:
        gw.begin_step()
        assert adm.active
        await asyncio.wait_for(asyncio.gather(*(session(i, *s) for i, s in
                                                enumerate(sessions))), 60)
        while adm.kv is not None and any(adm.kv.num_resident):  # the lapses free the rest
            await asyncio.sleep(0.01)
            adm.lapse(gw.now(), gw.book.tool_waits.horizon_s)
    assert len(delivered) == sum(n for _, n, _ in sessions)
    for key, ids in delivered.items():
        assert list(ids) == runner.stub.model.generate(prompts[key], 60)[0]
    assert sum(len(c.output_ids) for c in runner.calls) == sum(map(len, delivered.values()))
    assert adm.num_waiting == 0 and adm.kv is not None and adm.kv.reserved == [0.0] * num_replicas
    st_ = gw.stats()
    assert st_.num_turns == len(delivered) and st_.num_running == 0


@settings(max_examples=25, deadline=None)
@given(
    num_replicas=st.integers(1, 3),
    kv_tokens=st.integers(20, 400),
    sessions=st.lists(st.tuples(st.integers(0, 20), st.integers(1, 3), st.booleans()),
                      min_size=1, max_size=7),
    policy=st.sampled_from(POLICIES),
    seed=st.integers(0, 10**6),
)
def test_every_turn_exactly_once_under_admission(
    num_replicas: int, kv_tokens: int, sessions: list[tuple[int, int, bool]], policy: str,
    seed: int,
) -> None:
    """Small budgets (sessions wait; one too big for any replica is admitted alone), sessions
    that end unannounced (their reservation lapses with their tool wait): every turn once,
    token-exact, every reservation freed."""
    asyncio.run(scenario(num_replicas, kv_tokens, sessions, policy, seed))


def turn(sid: str, ctx: int, k: int = 0) -> TurnRequest:
    return TurnRequest(sid, None, k, ctx, ctx, None, {})


def test_waiting_sessions_are_served_in_arrival_order() -> None:
    """c would fit beside a at once, but b came first: c waits behind b."""
    async def run() -> list[str]:
        adm = LiveAdmission("on", True, 1)
        cfg = replica_configs(GatewayConfig(profile="qwen3-4b-h100"), 1)
        adm.begin_step([replace(cfg[0], kv_capacity_tokens=100)])
        order: list[str] = []

        async def one(sid: str, ctx: int) -> None:
            await adm.wait(turn(sid, ctx), [True], lambda: 0.0, lambda: 60.0)
            adm.placed(sid, 0, ctx)
            order.append(sid)
        tasks = []
        for sid, ctx in (("a", 80), ("b", 30), ("c", 10), ("d", 10)):
            tasks.append(asyncio.create_task(one(sid, ctx)))
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert order == ["a"] and adm.num_waiting == 3
        adm.ended("a")
        await asyncio.gather(*tasks)
        return order
    assert asyncio.run(run()) == ["a", "b", "c", "d"]


def test_a_lapsed_tool_wait_frees_the_reservation() -> None:
    async def run() -> LiveAdmission:
        adm = LiveAdmission("on", True, 1)
        cfg = replica_configs(GatewayConfig(profile="qwen3-4b-h100"), 1)
        adm.begin_step([replace(cfg[0], kv_capacity_tokens=100)])
        clock = [0.0]
        await adm.wait(turn("a", 90), [True], lambda: clock[0], lambda: 5.0)
        adm.placed("a", 0, 90)
        adm.turn_ended("a", 0, 5, 1.0)  # a never says it ended
        waiting = asyncio.create_task(adm.wait(turn("b", 50), [True], lambda: clock[0],
                                               lambda: 5.0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        clock[0] = 6.0  # a's tool wait outlasts the 5 s horizon
        await asyncio.wait_for(waiting, 1.0)
        return adm
    adm = asyncio.run(run())
    assert adm.num_lapsed == 1 and adm.kv is not None and adm.kv.resident("a") is None


def test_off_never_waits_and_auto_follows_the_rule() -> None:
    cfgs = [replace(c, kv_capacity_tokens=10_000)
            for c in replica_configs(GatewayConfig(profile="qwen3-4b-h100"), 2)]
    off = LiveAdmission("off", True, 2)
    assert not off.begin_step(cfgs) and off.room(turn("a", 5), [True, True]) is None
    auto = LiveAdmission("auto", True, 2)
    assert not auto.begin_step(cfgs)  # nothing seen yet
    # a window of 64 sessions at 30K context each against 20K of KV: KV-bound
    for i in range(64):
        asyncio.run(auto.wait(turn(f"s{i}", 30_000), [True, True], lambda: 0.0, lambda: 60.0))
    for i in range(64):
        auto.turn_ended(f"s{i}", 0, 500, 0.0)
        auto.ended(f"s{i}")
    assert auto.begin_step(cfgs) and auto.shape == StepShape(64, 30_000, 30_500, 500)
    baseline = LiveAdmission("auto", False, 2)  # a baseline policy admits only with "on"
    baseline.shape = auto.shape
    assert not baseline.begin_step(cfgs)
    with pytest.raises(ConfigError, match="kv_admission"):
        GatewayConfig(kv_admission="maybe")


@pytest.mark.parametrize("engine_use", [0.9999, 0.0])
async def test_a_turn_moves_mid_turn_only_where_the_reservations_leave_room(
        engine_use: float) -> None:
    """Turns all started on replica 0 (replica 1 out of service), then replica 1 is back. With
    its engine reporting its KV nearly full, no running turn moves there; with it empty,
    turns move there and their sessions' reservations go along."""
    runner = StubPieceRunner(2, StubModel(eos_every=10**9), seconds_per_token=0.001)
    cfg = GatewayConfig(policy="tailsieve", kv_admission="on", piece_tokens=8,
                        balance=BalanceSettings(interval_s=3600.0, horizon_s=30.0, seam_s=0.0),
                        profile="qwen3-4b-h100")
    gw = SessionGateway(2, runner, cfg, small_kv_parts(cfg, 2, 100_000))
    async with gw:
        gw.begin_step()
        adm = gw.admission
        assert adm.kv is not None
        gw.set_healthy(1, False)
        tasks = [asyncio.create_task(gw.generate(f"s{i}", "g", [7 + i] * 40, {},
                                                 max_tokens=400)) for i in range(8)]
        while len(gw._turns) < 8:
            await asyncio.sleep(0.001)
        gw.set_healthy(1, True)
        adm.kv.measure(1, KvReading(engine_use, 0))
        rooms = adm.rooms()
        assert rooms is not None
        made = gw.moves.check().num_made
        resident = [adm.kv.resident(f"s{i}") for i in range(8)]
        outs = await asyncio.gather(*tasks)
    assert all(len(o.token_ids) == 400 for o in outs)
    if engine_use > 0.5:
        assert rooms[1] < 40 and made == 0 and resident == [0] * 8
    else:
        assert made > 0 and resident.count(1) == made
