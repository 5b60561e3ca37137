"""The engines' KV read from their ``/metrics`` (``runtime.engine.engine_kv``): the parser against a
real vLLM server's text, the emulator exporting the same names, the poller and its fallback."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.engine.engine_kv import KvPoller, MetricsSource, parse_kv_reading
from tailsieve.runtime.engine.faults import ReplicaDownError, RequestError
from tailsieve.runtime.sessions import HttpPieceRunner
from tailsieve.session.admission import KvReading

# ``curl 127.0.0.1:8102/metrics`` of a vLLM 0.32.0 CPU server (tiny-qwen2, 8192 blocks of
# 128 tokens) while one request of n=8 ran
VLLM_TEXT = (Path(__file__).parent / "data" / "vllm_0_32_cpu_metrics.txt").read_text()
ENDPOINTS = [u for u in os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", "").split(",") if u]


def test_parses_a_real_vllm_servers_metrics() -> None:
    r = parse_kv_reading(VLLM_TEXT)
    assert r.capacity_tokens == 8192 * 128  # num_gpu_blocks x block_size
    assert r.usage == pytest.approx(0.0009766817238432424)  # vllm:kv_cache_usage_perc
    assert r.num_preemptions == 0


def test_reads_the_older_gauge_and_the_preemption_counter() -> None:
    text = ('# TYPE vllm:gpu_cache_usage_perc gauge\n'
            'vllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'
            '# TYPE vllm:num_preemptions counter\n'
            'vllm:num_preemptions_total{model_name="m"} 7.0\n')
    assert parse_kv_reading(text) == KvReading(0.25, 7, None)
    rounded = text.replace("0.25", "-1.6e-16")  # a running sum's rounding: empty
    assert parse_kv_reading(rounded) == KvReading(0.0, 7, None)


def test_engines_behind_one_server_weighted_by_their_size() -> None:
    lines = ["# TYPE vllm:kv_cache_usage_perc gauge",
             'vllm:kv_cache_usage_perc{engine="0"} 0.5',
             'vllm:kv_cache_usage_perc{engine="1"} 0.1',
             "# TYPE vllm:num_preemptions counter",
             'vllm:num_preemptions_total{engine="0"} 2.0',
             'vllm:num_preemptions_total{engine="1"} 3.0',
             "# TYPE vllm:cache_config_info gauge",
             'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1.0',
             'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="300"} 1.0']
    r = parse_kv_reading("\n".join(lines) + "\n")
    assert r.capacity_tokens == 6400 and r.num_preemptions == 5
    assert r.usage == pytest.approx((0.5 * 1600 + 0.1 * 4800) / 6400)


def test_only_the_kv_lines_are_parsed() -> None:
    """A line of another metric the Prometheus parser would refuse does not hide the KV
    reading (a server exports hundreds of lines; only these few are read)."""
    text = VLLM_TEXT.replace("\n# HELP", '\nvllm:other{x="1" 2.0\n# HELP', 1)
    assert text != VLLM_TEXT
    assert parse_kv_reading(text) == parse_kv_reading(VLLM_TEXT)
    assert parse_kv_reading(text).capacity_tokens == 8192 * 128


@pytest.mark.parametrize("text", [
    "# TYPE sglang:token_usage gauge\nsglang:token_usage 0.3\n",  # no vLLM KV gauge
    "vllm:kv_cache_usage_perc{ 0.3\n",  # malformed
    "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 1.7\n",  # not a share
])
def test_text_without_a_usable_reading_is_a_request_error(text: str) -> None:
    with pytest.raises(RequestError):
        parse_kv_reading(text)


def test_the_emulator_exports_vllms_names() -> None:
    async def go() -> list[KvReading]:
        cfg = EmulatorConfig.from_profile("qwen3-4b-h100", time_scale=0.01,
                                          kv_capacity_tokens=4000, max_model_len=1 << 14)
        async with EmulatorServer(cfg) as srv:
            runner = HttpPieceRunner([srv.url])
            assert isinstance(runner, MetricsSource)
            idle = parse_kv_reading(await runner.metrics(0, 2.0))
            # more context than the KV holds: the engine preempts, as vLLM does
            body = {"model": cfg.model_name, "prompt": [[7] * 1800] * 2, "max_tokens": 400,
                    "ignore_eos": True}
            task = asyncio.create_task(runner._t.post_json(srv.url + "/v1/completions", body,
                                                           30.0))
            busy = idle
            while busy.usage == 0.0:
                await asyncio.sleep(0.005)
                busy = parse_kv_reading(await runner.metrics(0, 2.0))
            await task
            done = parse_kv_reading(await runner.metrics(0, 2.0))
            await runner.aclose()
            assert srv.driver.engine.num_preemptions == done.num_preemptions
            return [idle, busy, done]

    idle, busy, done = asyncio.run(go())
    assert idle == KvReading(0.0, 0, 4000)
    assert 0.0 < busy.usage <= 1.0 and busy.capacity_tokens == 4000
    assert done.usage == 0.0 and done.num_preemptions >= 1


def test_the_poller_falls_back_on_a_fault_and_says_so_once(
        caplog: pytest.LogCaptureFixture) -> None:
    state = {"fail": True}
    got: list[tuple[int, KvReading | None]] = []
    ok = ("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.5\n"
          "# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total 1.0\n")

    async def read(replica: int, timeout_s: float) -> str:
        if replica == 1 and state["fail"]:
            raise ReplicaDownError("replica 1: connection refused")
        if replica == 2:
            await asyncio.sleep(10 * timeout_s)  # hung: the poller's timeout ends it
        return ok

    async def go() -> None:
        poller = KvPoller(read, 3, lambda r, x: got.append((r, x)), timeout_s=0.01)
        with caplog.at_level(logging.INFO, logger="tailsieve.runtime.engine.engine_kv"):
            for _ in range(3):
                await poller.poll_once()
            assert set(poller.unread) == {1, 2}
            state["fail"] = False
            await poller.poll_once()
        assert set(poller.unread) == {2}

    asyncio.run(go())
    assert got[:3] == [(0, KvReading(0.5, 1)), (1, None), (2, None)]
    assert got[-3:] == [(0, KvReading(0.5, 1)), (1, KvReading(0.5, 1)), (2, None)]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2 and all("book's model" in m for m in warned)  # once a replica
    assert any("can be read again" in r.getMessage() for r in caplog.records)


def test_a_runner_without_metrics_gets_no_poller() -> None:
    assert KvPoller.of(object(), 2, lambda r, x: None) is None
    with pytest.raises(ConfigError):
        KvPoller(HttpPieceRunner(["http://127.0.0.1:9"]).metrics, 1, lambda r, x: None,
                 interval_s=0.0)


def test_emulator_kv_size_is_the_profiles_without_an_override() -> None:
    kv = load_profile("qwen3-4b-h100").kv_capacity_tokens

    async def go() -> KvReading:
        async with EmulatorServer(EmulatorConfig.from_profile("qwen3-4b-h100")) as srv:
            runner = HttpPieceRunner([srv.url])
            try:
                return parse_kv_reading(await runner.metrics(0, 2.0))
            finally:
                await runner.aclose()

    assert asyncio.run(go()).capacity_tokens == kv


@pytest.mark.vllm
@pytest.mark.skipif(not ENDPOINTS, reason="TAILSIEVE_VLLM_ENDPOINTS not set")
def test_reads_a_real_vllm_servers_kv() -> None:
    async def go() -> list[KvReading | None]:
        runner = HttpPieceRunner(ENDPOINTS)
        got: list[KvReading | None] = [None] * len(ENDPOINTS)
        poller = KvPoller(runner.metrics, len(ENDPOINTS), got.__setitem__)
        try:
            await poller.poll_once()
        finally:
            await runner.aclose()
        assert not poller.unread
        return got

    for r in asyncio.run(go()):
        assert r is not None and r.capacity_tokens is not None and r.capacity_tokens > 0
        assert 0.0 <= r.usage <= 1.0 and r.num_preemptions >= 0
