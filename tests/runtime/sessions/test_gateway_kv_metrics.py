"""The gateway's admission by KV room reads the engines' own KV (``runtime.engine.engine_kv``): a
replica whose engine is full of work the book cannot see gets no new session; without a
reading the book's model decides."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.sessions import GatewayConfig, PieceOutput, PieceRequest, SessionGateway
from tailsieve.runtime.sessions.admit import LiveAdmission
from tailsieve.runtime.stub import StubModel, StubPieceRunner
from tailsieve.session.admission import KvReading
from tailsieve.session.turn import TurnRequest

KV_TOKENS = 4000  # each emulated engine's; the gateway's profile says 445K


async def place_beside_outside_work(read_metrics: bool) -> tuple[int, KvReading | None]:
    """Two emulated replicas; another client fills replica 0's KV; where does a new session
    of 1,000 tokens go (and what did the gateway read of replica 0)?"""
    cfgs = [EmulatorConfig.from_profile("qwen3-4b-h100", time_scale=1.0, seed=i,
                                        kv_capacity_tokens=KV_TOKENS, max_model_len=1 << 14)
            for i in range(2)]
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(EmulatorServer(c)) for c in cfgs]
        gcfg = GatewayConfig(policy="tailsieve", kv_admission="on", profile="qwen3-4b-h100",
                             kv_metrics_interval_s=0.02 if read_metrics else None)
        gw = await stack.enter_async_context(
            SessionGateway.over_http([s.url for s in servers], gcfg))
        gw.begin_step()
        body = {"model": cfgs[0].model_name, "prompt": [7] * 3000, "max_tokens": 900,
                "ignore_eos": True}  # about 9 s of decoding at time scale 1
        outside = asyncio.create_task(
            gw.runner._t.post_json(servers[0].url + "/v1/completions", body, 60.0))  # type: ignore[attr-defined]
        try:
            while servers[0].driver.engine.num_running == 0:
                await asyncio.sleep(0.005)
            if read_metrics:
                while (gw.admission.readings[0] is None
                       or gw.admission.readings[0].usage < 0.5):
                    await asyncio.sleep(0.005)
            req = gw.book.request("s", "g", 1000, 1000, 100)
            d = await asyncio.wait_for(gw.place(req), 5.0)
            return d.replica, gw.admission.readings[0]
        finally:
            outside.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await outside


def test_a_new_session_avoids_an_engine_full_of_work_the_book_cannot_see() -> None:
    replica, reading = asyncio.run(place_beside_outside_work(read_metrics=True))
    assert reading is not None and reading.capacity_tokens == KV_TOKENS
    assert replica == 1


def test_without_the_engines_reading_the_book_sends_it_there() -> None:
    """The control: the same placement by the book's model alone goes to replica 0 (so the
    test above fails where the measurement is ignored)."""
    replica, reading = asyncio.run(place_beside_outside_work(read_metrics=False))
    assert reading is None and replica == 0


def test_a_waiting_session_is_admitted_when_the_engine_reports_room() -> None:
    async def go() -> list[str]:
        adm = LiveAdmission("on", True, 1)
        adm.begin_step([_config(1000)])
        adm.measure(0, KvReading(0.0, 0))
        adm.measure(0, KvReading(0.95, 0))  # the engine holds work the book cannot see
        events: list[str] = []
        turn = TurnRequest("s", "g", 0, 200, 200, None)
        task = asyncio.create_task(adm.wait(turn, [True], lambda: 0.0, lambda: 1e9))
        await asyncio.sleep(0.02)
        events.append("waiting" if not task.done() else "placed")
        adm.measure(0, KvReading(0.1, 0))
        await asyncio.wait_for(task, 1.0)
        events.append("placed")
        return events

    assert asyncio.run(go()) == ["waiting", "placed"]


def test_the_engines_kv_size_prices_kv_bound() -> None:
    """``auto`` asks ``kv_bound`` with the KV size the engines report, not the profile's."""
    adm = LiveAdmission("auto", True, 2)
    configs = [_config(None), _config(None)]
    assert adm.measured_configs(configs) == configs
    adm.measure(0, KvReading(0.2, 0, 5000))
    got = adm.measured_configs(configs)
    assert got[0].kv_capacity_tokens == 5000 and got[1].kv_capacity_tokens is None


def test_a_runner_without_metrics_leaves_the_books_model(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    class NoMetrics:
        """A runner that only runs pieces (no ``metrics``)."""

        def __init__(self) -> None:
            self.inner = StubPieceRunner(1, StubModel())

        async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
            return await self.inner.run_piece(replica, piece)

    async def go() -> bool:
        async with SessionGateway(1, NoMetrics(), GatewayConfig(kv_admission="on")) as gw:
            return gw.admission.poller is None

    with caplog.at_level(logging.INFO, logger="tailsieve.runtime.engine.engine_kv"):
        assert asyncio.run(go())
    assert any("book's model" in r.getMessage() for r in caplog.records)


def _config(kv_tokens: int | None) -> ReplicaConfig:
    return ReplicaConfig.from_profile(builtin_profile("qwen3-4b-h100"),
                                      kv_capacity_tokens=kv_tokens)
