"""Prometheus endpoint (own registry), JSON step log, and the progress display."""

from __future__ import annotations

import io
import json
import socket
from dataclasses import replace

import aiohttp
from rich.console import Console

from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.step.observe import ProgressDisplay, RuntimeMetrics, StepLog, StepMetrics
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.step.step_state import StepProgress
from tailsieve.runtime.stub import StubTransport


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_metrics_log_and_progress() -> None:
    stub = StubTransport(lambda p, s: 10 + 40 * (p == "p0"), seconds_per_token=0.0005)
    metrics, buf = RuntimeMetrics(), io.StringIO()
    seen: list[StepProgress] = []
    cfg = RolloutConfig(
        num_groups=4, group_size=2, model="m", sampling=SamplingParams(seed=0, max_tokens=100)
    )
    urls = ["http://r0", "http://r1"]
    port = free_port()
    await metrics.serve(port)
    try:
        async with TailSieveRollout(
            urls,
            cfg,
            transport=stub,
            on_progress=seen.append,
            metrics=metrics,
            step_log=StepLog(buf),
        ) as ro:
            await ro.step([PromptInput(f"p{i}", text=f"p{i}") for i in range(8)])
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
    finally:
        await metrics.aclose()
    assert "tailsieve_steps_total 1.0" in text
    assert 'tailsieve_replica_healthy{replica="1"} 1.0' in text
    assert "tailsieve_aborted_tokens_total" in text
    assert "tailsieve_moves_active 1.0" in text and "tailsieve_profile_fitted" in text
    line = json.loads(buf.getvalue().strip())
    assert line["event"] == "tailsieve.step" and line["num_groups"] == 4
    assert line["profile"] == "auto-probe"  # step 0 ran on the probe's curve
    assert seen and seen[-1].num_bulk_done >= seen[-1].num_bulk_needed
    # two collectors never clash: each RuntimeMetrics has its own registry
    RuntimeMetrics()
    out = io.StringIO()
    with ProgressDisplay(Console(file=out, force_terminal=False, width=80)) as d:
        d.update(seen[-1])
    assert "bulk" in out.getvalue()


def test_moves_off_reason_is_a_labelled_gauge() -> None:
    metrics = RuntimeMetrics()
    metrics.record_moves("moves=False")
    text = metrics.render().decode()
    assert 'tailsieve_moves_off{reason="moves=False"} 1.0' in text
    assert "tailsieve_moves_active 0.0" in text
    metrics.record_moves(None)  # moves back on: no reason left
    text = metrics.render().decode()
    assert "tailsieve_moves_active 1.0" in text and 'reason="' not in text


def test_a_step_s_logged_figures_are_floats_under_one_prefix() -> None:
    m = StepMetrics(step=3, policy="tailsieve", num_groups=4, q=5, m=2, makespan_s=1.5,
                    tail_time_s=0.25, bulk_cut_s=1.0, wall_s=2.0, num_launched=10,
                    num_aborted=1, num_regenerated=0, generated_tokens=900, wasted_tokens=40,
                    delivered_tokens=860, num_carried_next=2, num_healthy_replicas=2,
                    is_flush=False, num_moves=7, moves_off_reason="", profile_fitted=True)
    logged = m.logged()
    assert all(k.startswith("tailsieve/") and type(v) is float for k, v in logged.items())
    assert logged["tailsieve/q"] == 5.0 and logged["tailsieve/num_moves"] == 7.0
    assert logged["tailsieve/makespan_s"] == 1.5 and logged["tailsieve/wasted_tokens"] == 40.0
    assert logged["tailsieve/moves_active"] == 1.0 and logged["tailsieve/profile_fitted"] == 1.0
    assert replace(m, moves_off_reason="moves=False").logged()["tailsieve/moves_active"] == 0.0
