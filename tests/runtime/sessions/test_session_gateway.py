"""The session gateway over in-memory replicas (``StubPieceRunner``): turns are token-exact
chains of pieces wherever their pieces ran, sessions stick by the router, running turns move at
piece ends, a dead replica's turns continue elsewhere from their last seam, and a crashed
rebalancer is logged, counted and turns moves off."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

import pytest

from tailsieve.core.balancer import BalanceSettings
from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.engine.backends import SamplingParams
from tailsieve.runtime.engine.faults import ReplicaDownError
from tailsieve.runtime.engine.pieces import TokenDelta
from tailsieve.runtime.sessions import (
    GatewayConfig,
    ModelClock,
    PieceOutput,
    PieceRequest,
    SessionGateway,
    TurnResult,
)
from tailsieve.runtime.stub import StubModel, StubPieceRunner

NEVER_EOS = StubModel(eos_every=10**9)
SLOW_CHECKS = BalanceSettings(interval_s=3600.0, horizon_s=30.0, seam_s=0.0)


def prompt(i: int, n: int = 40) -> list[int]:
    return [10 * i + j for j in range(n)]


def expected(runner: StubPieceRunner, ids: Sequence[int], max_tokens: int) -> list[int]:
    return runner.stub.model.generate(ids, max_tokens)[0]


def assert_exact(runner: StubPieceRunner, ids: Sequence[int], max_tokens: int,
                 out: TurnResult) -> None:
    """The turn is the one-go generation, and every piece was sent the prompt plus exactly
    the tokens before it."""
    want, reason = runner.stub.model.generate(ids, max_tokens)
    assert list(out.token_ids) == want and out.finish_reason == reason
    if out.logprobs is not None:  # asked for: the pieces' logprobs in order
        assert out.logprobs == tuple(-((t % 7) + 1) / 10 for t in want)
    assert out.text == "".join(f"<{t}>" for t in want)
    assert [p.start for p in out.pieces] == [0, *(p.end for p in out.pieces[:-1])]
    assert out.pieces[-1].end == len(want)
    sent = [c for c in runner.calls if not c.failed]
    for span in out.pieces:
        call = next(c for c in sent if list(c.prompt_ids) == [*ids, *want[:span.start]])
        assert call.replica == span.replica


async def test_a_turn_is_the_chain_of_its_pieces() -> None:
    runner = StubPieceRunner(2, NEVER_EOS)
    async with SessionGateway(2, runner, GatewayConfig(piece_tokens=16)) as gw:
        out = await gw.generate("s", "g", prompt(1), {"temperature": 1.0, "logprobs": 0},
                                max_tokens=50)
    assert len(out.pieces) == 4 and out.logprobs is not None  # 16 + 16 + 16 + 2
    assert_exact(runner, prompt(1), 50, out)
    st = gw.stats()
    assert st.num_turns == 1 and st.num_pieces == 4 and st.num_running == 0


class _NoEcho(StubPieceRunner):
    """A server that tokenizes a text prompt but does not echo its ids."""

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        return replace(await super().run_piece(replica, piece), prompt_ids=None)


class _DiesAfterStreaming(StubPieceRunner):
    """Its replica dies under the first piece after two tokens (streamed to the piece's sink
    where it has one), which the runner keeps as the fault's partial; ``echo``: the pieces
    after it echo their prompt's ids."""

    died = False
    echo = True

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        if not self.died:
            self.died = True
            if piece.sink is not None:
                piece.sink(TokenDelta((65, 66), "AB"))
            fault = ReplicaDownError("the replica died mid-piece")
            fault.partial = PieceOutput((65, 66), "abort", text="AB")
            raise fault
        out = await super().run_piece(replica, piece)
        return out if self.echo else replace(out, prompt_ids=None)


class _NoEchoDies(_DiesAfterStreaming):
    """A server that does not echo a text prompt's ids, whose replica dies under the first
    piece."""

    echo = False


async def test_a_streamed_text_turn_whose_tokens_cannot_be_continued_fails_not_repeats() -> None:
    """Streamed tokens of a text prompt whose ids no server echoed cannot be continued: sent
    again, the answer would stream them twice; the turn fails. Unstreamed, it starts again."""
    text = "".join(chr(t) for t in prompt(3))
    got: list[tuple[int, ...]] = []
    async with SessionGateway(2, _NoEchoDies(2, NEVER_EOS), GatewayConfig()) as gw:
        with pytest.raises(ConfigError, match="did not echo"):
            await gw.generate("s", "g", (), SamplingParams(max_tokens=8), prompt_text=text,
                              on_tokens=lambda _i, d: got.append(d.token_ids))
        assert gw.healthy().count(False) == 1  # the dead replica is out all the same
    assert got == [(65, 66)]  # streamed once, never again
    async with SessionGateway(2, _NoEchoDies(2, NEVER_EOS), GatewayConfig()) as gw:
        whole = await gw.generate("s", "g", (), SamplingParams(max_tokens=8), prompt_text=text)
    assert len(whole.token_ids) == 8 and whole.num_relocations == 1


async def test_a_streamed_turn_that_must_start_again_fails_instead_of_streaming_twice() -> None:
    """With penalties a turn cannot be continued: after a fault it starts again from its
    prompt. Streamed, its first tokens already reached the client: the turn fails (the dead
    replica out); unstreamed, it starts again elsewhere."""
    got: list[tuple[int, ...]] = []
    penalized = {"max_tokens": 8, "presence_penalty": 0.5}
    async with SessionGateway(2, _DiesAfterStreaming(2, NEVER_EOS), GatewayConfig()) as gw:
        with pytest.raises(ConfigError, match="streamed"):
            await gw.generate("s", "g", prompt(1), penalized,
                              on_tokens=lambda _i, d: got.append(d.token_ids))
        assert gw.healthy().count(False) == 1
    assert got == [(65, 66)]
    async with SessionGateway(2, _DiesAfterStreaming(2, NEVER_EOS), GatewayConfig()) as gw:
        whole = await gw.generate("s", "g", prompt(1), penalized)
    assert len(whole.token_ids) == 8 and whole.num_relocations == 1
    assert whole.token_ids[:2] != (65, 66)  # started again: nothing of the dead piece kept


async def test_a_text_prompt_goes_first_and_its_echoed_ids_carry_the_turn_on() -> None:
    runner = StubPieceRunner(2, NEVER_EOS)
    text = "".join(chr(t) for t in prompt(3))
    async with SessionGateway(2, runner, GatewayConfig(piece_tokens=16)) as gw:
        out = await gw.generate("s", "g", (), {"temperature": 1.0, "logprobs": 0},
                                max_tokens=40, prompt_text=text, text_tokens=7)
        assert out.prompt_ids == tuple(prompt(3)) and len(out.pieces) == 3
        assert_exact(runner, prompt(3), 40, out)  # the later pieces carry the echoed ids
        one = await gw.generate("t", "g", (), SamplingParams(max_tokens=10), prompt_text=text)
        assert len(one.pieces) == 1 and one.prompt_ids == tuple(prompt(3))
        with pytest.raises(ConfigError, match="not both"):
            await gw.generate("u", "g", prompt(1), SamplingParams(max_tokens=4),
                              prompt_text=text)
    deaf = _NoEcho(2, NEVER_EOS)
    async with SessionGateway(2, deaf, GatewayConfig(piece_tokens=16)) as gw:
        whole = await gw.generate("s", "g", (), SamplingParams(max_tokens=16), prompt_text=text)
        assert len(whole.token_ids) == 16 and whole.prompt_ids is None
        with pytest.raises(ConfigError, match="did not echo"):  # a ChainError
            await gw.generate("t", "g", (), SamplingParams(max_tokens=40), prompt_text=text)


async def test_later_turns_extend_the_context_and_stay_where_it_is_cached() -> None:
    runner = StubPieceRunner(3, StubModel(eos_every=13))
    cfg = GatewayConfig(policy="verl-sticky", piece_tokens=8)
    async with SessionGateway(3, runner, cfg) as gw:
        ctx = prompt(2)
        homes = []
        for turn in range(3):
            out = await gw.generate("s", "g", ctx, SamplingParams(max_tokens=30, logprobs=0))
            assert_exact(runner, ctx, 30, out)
            homes.append(out.replica)
            if turn:
                assert out.num_cached_tokens is not None and out.num_cached_tokens >= 16 * (
                    (len(ctx) - 5) // 16) - 16  # the previous turn's context, in blocks
            ctx = [*ctx, *out.token_ids, 7, 7, 7, 7, 7]  # the tool's observation
        gw.end_session("s")
    assert len(set(homes)) == 1  # sticky
    st = gw.stats()
    assert st.moves_at_boundary == 0 and st.moves_mid_turn == 0
    assert st.moves_off_reason == "policy 'verl-sticky' does not move running responses (only " \
        "'tailsieve')"
    assert 0 < st.prefix_hit_tokens < st.prefix_query_tokens


async def test_a_running_turn_moves_at_its_next_seam() -> None:
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.002)
    cfg = GatewayConfig(piece_tokens=8, balance=SLOW_CHECKS)
    async with SessionGateway(2, runner, cfg) as gw:
        task = asyncio.create_task(gw.generate("s", None, prompt(3), {}, max_tokens=64))
        while not gw._turns or gw._turns["s"].piece_on is None:
            await asyncio.sleep(0.001)
        src = gw._turns["s"].replica
        assert gw.moves.move("s", 1 - src)
        assert not gw.moves.move("s", src)  # it waits on its move: no second one before the seam
        out = await task
    assert_exact(runner, prompt(3), 64, out)
    assert out.pieces[0].replica == src and out.pieces[1].replica == 1 - src
    assert out.num_mid_turn_moves == 1
    st = gw.stats()
    assert st.moves_mid_turn == 1 and st.reprefill_tokens > 0


async def test_a_move_interrupts_the_running_piece_where_the_runner_can() -> None:
    """With a runner that interrupts pieces a turn runs as one piece, and a move ends it at
    once: the turn continues on the destination from the tokens it had, none generated
    twice; the book moves the turn when its piece starts there."""
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.002, interrupts=True)
    async with SessionGateway(2, runner, GatewayConfig(balance=SLOW_CHECKS)) as gw:
        task = asyncio.create_task(gw.generate("s", None, prompt(3), {}, max_tokens=300))
        while not gw._turns or gw._turns["s"].piece_on is None:
            await asyncio.sleep(0.001)
        src = gw._turns["s"].replica
        await asyncio.sleep(0.05)
        assert gw.moves.move("s", 1 - src)
        assert gw.book.views(gw.now())[src].num_running == 1  # not before it takes effect
        assert not gw.moves.move("s", src)  # held until its piece started on the destination
        while not gw._turns["s"].spans:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)
        assert gw.book.views(gw.now())[1 - src].num_running == 1
        assert gw.moves.move("s", src)  # it may move again
        out = await task
    assert_exact(runner, prompt(3), 300, out)
    assert [p.replica for p in out.pieces] == [src, 1 - src, src]
    assert 0 < out.pieces[0].end < out.pieces[1].end < 300  # each ended where it was
    assert runner.num_interrupts == 2 and out.num_mid_turn_moves == 2
    assert sum(len(c.output_ids) for c in runner.calls) == 300


async def test_an_interrupting_runner_s_turns_run_as_one_piece_unless_capped() -> None:
    runner = StubPieceRunner(2, NEVER_EOS, interrupts=True)
    async with SessionGateway(2, runner, GatewayConfig()) as gw:
        whole = await gw.generate("a", None, prompt(1), {}, max_tokens=100)
    async with SessionGateway(2, runner, GatewayConfig(piece_tokens=32)) as gw:
        capped = await gw.generate("b", None, prompt(2), {}, max_tokens=100)
    assert len(whole.pieces) == 1 and len(capped.pieces) == 4


async def test_the_rebalancer_moves_turns_to_a_replica_that_came_back() -> None:
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.001)
    cfg = GatewayConfig(piece_tokens=8, balance=SLOW_CHECKS, profile="qwen3-4b-h100")
    async with SessionGateway(2, runner, cfg) as gw:
        gw.set_healthy(1, False)  # every turn starts on replica 0
        tasks = [asyncio.create_task(gw.generate(f"s{i}", "g", prompt(i), {}, max_tokens=400))
                 for i in range(8)]
        while len(gw._turns) < 8:
            await asyncio.sleep(0.001)
        gw.set_healthy(1, True)
        made = gw.moves.check().num_made
        outs = await asyncio.gather(*tasks)
    assert made > 0
    for i, out in enumerate(outs):
        assert_exact(runner, prompt(i), 400, out)
    assert sum(o.num_mid_turn_moves for o in outs) == made == gw.stats().moves_mid_turn
    assert {p.replica for o in outs for p in o.pieces} == {0, 1}


async def test_a_dead_replica_s_turns_continue_elsewhere_from_the_last_seam() -> None:
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.001)
    async with SessionGateway(2, runner, GatewayConfig(piece_tokens=16)) as gw:
        tasks = [asyncio.create_task(gw.generate(f"s{i}", None, prompt(i), {}, max_tokens=120))
                 for i in range(4)]
        while len([c for c in runner.calls if not c.failed]) < 6:
            await asyncio.sleep(0.001)
        runner.kill(0)
        outs = await asyncio.gather(*tasks)
        st = gw.stats()
        assert gw.healthy() == (False, True)
        runner.revive(0)
        while not gw.healthy()[0]:
            await asyncio.sleep(0.01)  # probed back into service
    for i, out in enumerate(outs):
        assert_exact(runner, prompt(i), 120, out)
    assert st.num_relocations == sum(o.num_relocations for o in outs) > 0
    failed = [c for c in runner.calls if c.failed]
    assert failed and all(c.replica == 0 for c in failed)
    # nothing generated twice: the delivered pieces tile each turn exactly once
    assert sum(len(c.output_ids) for c in runner.calls) == 4 * 120


async def test_a_rebalancer_crash_is_logged_counted_and_turns_moves_off(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.001)
    cfg = GatewayConfig(piece_tokens=8, balance=BalanceSettings(interval_s=0.005,
                                                                horizon_s=30.0))
    gw = SessionGateway(2, runner, cfg)

    def broken(now_s: float, rooms: object = None) -> list[object]:
        raise RuntimeError("book exploded")

    monkeypatch.setattr(gw.book, "balance_loads", broken)
    with caplog.at_level(logging.ERROR):
        async with gw:
            out = await gw.generate("s", None, prompt(4), {}, max_tokens=200)
            while gw.stats().rebalancer_crashes == 0:
                await asyncio.sleep(0.005)
            later = await gw.generate("t", None, prompt(5), {}, max_tokens=20)
    assert_exact(runner, prompt(4), 200, out)
    st = gw.stats()
    assert st.rebalancer_crashes == 1
    assert st.moves_off_reason is not None and "book exploded" in st.moves_off_reason
    assert len(later.pieces) == 1  # moves off: a turn is one piece
    assert any("book exploded" in r.getMessage() for r in caplog.records)


async def test_moves_off_keeps_sessions_home_in_one_piece() -> None:
    runner = StubPieceRunner(2, StubModel(eos_every=11))
    async with SessionGateway(2, runner, GatewayConfig(moves=False)) as gw:
        ctx = prompt(6)
        outs = []
        for _ in range(3):
            out = await gw.generate("s", None, ctx, {}, max_tokens=64)
            outs.append(out)
            ctx = [*ctx, *out.token_ids, 1, 2, 3]
    assert all(len(o.pieces) == 1 for o in outs)
    assert len({o.replica for o in outs}) == 1
    assert gw.stats().moves_off_reason == "moves=False"


async def test_the_balance_gate_turns_mid_turn_moves_off_where_they_lose() -> None:
    runner = StubPieceRunner(2, NEVER_EOS)
    async with SessionGateway(2, runner, GatewayConfig(piece_tokens=8)) as gw:
        for _ in range(12):
            balanced = gw.begin_step()
            gw.end_step(2.0 if balanced else 1.0, 1.0)  # steps with moves: twice as slow
        off = [not gw.begin_step() for _ in range(16)]
        assert sum(off) >= 13  # off, but for one probe in 8 steps
        while gw.begin_step():
            pass
        reason = gw.stats().moves_off_reason
        router_moves = gw.router.settings.moves  # type: ignore[attr-defined]
    assert reason is not None and reason.startswith("the balance gate")
    assert router_moves is False  # a step the gate does not balance keeps sessions home
    assert gw.moves.settings.expected_step_s in (1.0, 2.0)  # the last step's time


async def test_bad_input_is_refused() -> None:
    runner = StubPieceRunner(1)
    async with SessionGateway(1, runner) as gw:
        with pytest.raises(ConfigError, match="empty prompt"):
            await gw.generate("s", None, [], {})
        with pytest.raises(ConfigError, match="unknown session policy"):
            GatewayConfig(policy="nope")
        task = asyncio.create_task(gw.generate("s", None, prompt(1), {}, max_tokens=5))
        await asyncio.sleep(0)
        with pytest.raises(ConfigError, match="already has a turn running"):
            await gw.generate("s", None, prompt(1), {}, max_tokens=5)
        await task


async def test_a_turn_fails_when_no_replica_comes_back() -> None:
    runner = StubPieceRunner(1, NEVER_EOS, seconds_per_token=0.001)
    cfg = GatewayConfig(piece_tokens=8, probe_interval_s=0.01, no_replica_timeout_s=0.05)
    async with SessionGateway(1, runner, cfg) as gw:
        task = asyncio.create_task(gw.generate("s", None, prompt(1), {}, max_tokens=100))
        while not runner.calls:
            await asyncio.sleep(0.001)
        runner.kill(0)
        with pytest.raises(ReplicaError, match="no healthy replica"):
            await task
        st = gw.stats()
    assert st.num_failed_turns == 1 and st.num_running == 0


async def test_a_turn_no_replica_takes_is_withdrawn_from_the_book() -> None:
    """The fleet is down when a session's next turn arrives: the turn fails, and the session
    stands in the book as before it asked (its tool wait lapses with the horizon again),
    not counted at home until the session ends."""
    runner = StubPieceRunner(1, NEVER_EOS, seconds_per_token=0.001)
    cfg = GatewayConfig(probe_interval_s=0.01, no_replica_timeout_s=0.05)
    async with SessionGateway(1, runner, cfg) as gw:
        await gw.generate("s", None, prompt(1), {}, max_tokens=8)
        runner.kill(0)
        gw.health.down(0, ReplicaDownError("killed"))
        with pytest.raises(ReplicaError, match="no healthy replica"):
            await gw.generate("s", None, prompt(1, 60), {}, max_tokens=8)
        late = gw.now() + 10 * gw.book.tool_waits.horizon_s
        assert gw.book.views(late)[0].num_tool_waits == 0
        assert gw.book.request("s", None, 60).turn_index == 1  # the same second turn


async def test_a_running_piece_s_progress_is_estimated_from_the_cost_model() -> None:
    t = [0.0]
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.01)
    cfg = GatewayConfig(piece_tokens=64, balance=SLOW_CHECKS, profile="qwen3-4b-h100")
    async with SessionGateway(2, runner, cfg, clock=lambda: t[0]) as gw:
        task = asyncio.create_task(gw.generate("s", None, prompt(1), {}, max_tokens=128))
        while not gw._turns or gw._turns["s"].piece_on is None:
            await asyncio.sleep(0.001)
        r = gw._turns["s"].replica
        tp = gw.parts.configs[r].throughput
        before = gw.book.balance_loads(t[0])[r].context_tokens
        step = tp.tau(1) + tp.context_s_per_token * before
        t[0] += 10.5 * step  # ten whole decode iterations
        gw.moves.estimate_progress(t[0])
        mid = gw.book.balance_loads(t[0])[r].context_tokens
        t[0] += 1e6  # far beyond the piece: at most its cap
        gw.moves.estimate_progress(t[0])
        capped = gw.book.balance_loads(t[0])[r].context_tokens
        await task
    assert mid == before + 10 and capped == before + 64


async def test_the_result_carries_each_piece_s_detail_and_engine_args_reach_every_piece(
) -> None:
    """What a runner says beyond the tokens (``PieceOutput.detail``) rides the chain into
    ``TurnResult.chain``, piece by piece; ``engine_args`` go with every piece (no side
    channel either way)."""
    inner = StubPieceRunner(2, NEVER_EOS)
    seen: list[object] = []

    class Detailing:
        async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
            seen.append(piece.engine_args)
            out = await inner.run_piece(replica, piece)
            return replace(out, detail=(piece.request_id, len(out.token_ids)))

    async with SessionGateway(2, Detailing(), GatewayConfig(piece_tokens=16)) as gw:
        out = await gw.generate("s", "g", prompt(1), {"temperature": 1.0}, max_tokens=50,
                                engine_args={"priority": 3})
    assert seen == [{"priority": 3}] * 4
    assert [p.detail for p in out.chain] == [("s-t1-0", 16), ("s-t1-1", 16), ("s-t1-2", 16),
                                             ("s-t1-3", 2)]
    assert [t for p in out.chain for t in p.token_ids] == list(out.token_ids)


def test_a_gateway_over_http_refuses_the_chat_backend_up_front() -> None:
    """A continued piece is token ids on /v1/completions: a chat gateway would fail every one."""
    with pytest.raises(ConfigError, match="backend 'vllm'"):
        SessionGateway.over_http(["http://127.0.0.1:9"], backend="vllm-chat")


async def test_checks_come_each_interval_of_the_gateway_s_clock_and_no_sooner_at_turn_ends(
) -> None:
    """As the agentic simulator checks: every ``interval_s`` of the gateway's clock (a
    ``ModelClock`` at 100 model seconds per real second waits 0.1 real s for 10 model s), and
    a turn's end brings no check sooner (turns end about every 20 ms here, which would
    double the checks if each brought one half an interval after the last)."""
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.001)
    checks = BalanceSettings(interval_s=10.0, horizon_s=30.0, seam_s=0.0)
    cfg = GatewayConfig(piece_tokens=8, balance=checks)
    async with SessionGateway(2, runner, cfg, clock=ModelClock(0.01)) as gw:
        assert gw.moves.check_timer.time_scale == 0.01
        long = asyncio.create_task(gw.generate("long", None, prompt(1), {}, max_tokens=450))
        t0 = gw.now()
        for i in range(20):
            await gw.generate(f"short{i}", None, prompt(i + 2), {}, max_tokens=16)
        await long
        elapsed_model_s = gw.now() - t0
    assert elapsed_model_s > 30.0  # long enough for several checks
    assert 2 <= gw.moves.num_checks <= elapsed_model_s / checks.interval_s + 2
