"""A crash of the live rebalancer is no silent failure: it is logged once, counted in the step's
record and on the router's /metrics, moves stop for the rest of that step, and nothing is lost
(every group delivered exactly once, whole, each response token-exact)."""

from __future__ import annotations

import io
import json
import logging
import warnings

import pytest
from test_continuation import URLS, assert_exact, ccfg, lengths_fn
from test_live_executor import prompts_for
from test_live_rebalance import COSTS, IDS, TABLE, piled_plan

from tailsieve.core.protocol import validate_outcome
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.observe import RuntimeMetrics, StepLog
from tailsieve.runtime.step.rebalancer import LiveRebalancer
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.stub import StubTransport, token_at

warnings.filterwarnings("ignore", message="per-request seeds")
CRASH = "injected crash"


class CrashingRebalancer(LiveRebalancer):
    """Checks as usual until a check has moved something, then raises at its next check."""

    crashed_after_checks: int | None = None  # checks made before the crash

    async def check_async(self) -> int:
        if self.tally.num_moves > 0:
            type(self).crashed_after_checks = self.tally.num_checks
            raise RuntimeError(CRASH)
        return await super().check_async()


class CrashingExecutor(LiveExecutor):
    rebalancer_class = CrashingRebalancer


def crash_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "tailsieve.runtime.step.executor" and "crashed" in r.getMessage()]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_crashed_rebalancer_stops_moving_and_loses_nothing(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="tailsieve.runtime.step.executor")
    CrashingRebalancer.crashed_after_checks = None
    length_of = lengths_fn(TABLE)
    stub = StubTransport(length_of, seconds_per_token=0.0005)
    plan = piled_plan(IDS, cut=None)
    ex = CrashingExecutor(URLS, ccfg(piece_tokens=32, stream=stream), transport=stub,
                          balance_costs=COSTS)
    res = await ex.run(plan, prompts_for(plan))
    assert CrashingRebalancer.crashed_after_checks is not None, "the crash was not injected"
    # nothing lost: every group once, whole, each response the one-go tokens
    validate_outcome(plan, res.outcome)
    assert sorted(res.groups) == sorted(IDS)
    assert_exact(res, length_of, stub, text=not stream)
    # the crash is kept for the step's record, and logged once with its traceback
    assert ex.last_balance_error == f"RuntimeError: {CRASH}"
    logged = crash_records(caplog)
    assert len(logged) == 1 and logged[0].exc_info is not None
    # moves are off from the crash on: no check ran after it, the moves before it stand
    tally = ex.last_moves
    assert tally.num_checks == CrashingRebalancer.crashed_after_checks
    assert tally.num_moves >= 1 and ex.num_moves == tally.num_moves


async def test_a_step_without_a_crash_records_none() -> None:
    length_of = lengths_fn(TABLE)
    ex = LiveExecutor(URLS, ccfg(piece_tokens=32), transport=StubTransport(length_of, 0.0005),
                      balance_costs=COSTS)
    plan = piled_plan(IDS, cut=None)
    await ex.run(plan, prompts_for(plan))
    assert ex.last_moves.num_checks >= 1 and ex.last_balance_error is None


async def test_the_crash_is_counted_in_step_metrics_the_step_log_and_prometheus(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Through the rollout API: ``StepMetrics`` (the line of ``steps.jsonl``) and the router's
    /metrics count the crash; every delivered response is still exact."""
    caplog.set_level(logging.ERROR, logger="tailsieve.runtime.step.executor")
    table = {f"p{i}": 20 + (i * 97) % 400 for i in range(200)}
    length_of = lengths_fn(table)
    stub = StubTransport(length_of, seconds_per_token=0.0002)
    cfg = RolloutConfig(
        num_groups=8, group_size=2, model="m", sampling=SamplingParams(max_tokens=2000, seed=0),
        piece_tokens=40, profile="cpu",
        controller={"seam_s": 0.001, "gate": None},  # every step balanced (no gate)
    )  # fmt: skip
    source = iter(PromptInput(p, text=p) for p in table)
    metrics, log = RuntimeMetrics(), io.StringIO()
    urls = [f"http://r{i}" for i in range(4)]
    async with TailSieveRollout(urls, cfg, transport=stub, metrics=metrics,
                                step_log=StepLog(log)) as ro:
        ro.executor.rebalancer_class = CrashingRebalancer
        batches = []
        for _ in range(4):
            batches.append(await ro.step([next(source) for _ in range(ro.num_fresh_needed())]))
            for g in batches[-1].groups:
                for s, r in enumerate(g.responses):
                    assert r.token_ids == tuple(token_at(s, j) for j in range(length_of(
                        g.prompt_id, s)))
    assert stub.log.broken_chains == []
    crashed = [b.metrics for b in batches if b.metrics.num_rebalancer_errors]
    assert crashed, "no step crashed (no step moved anything)"
    for m in crashed:
        assert m.num_rebalancer_errors == 1 and m.rebalancer_error == f"RuntimeError: {CRASH}"
    for b in batches:
        assert (b.metrics.rebalancer_error is None) == (b.metrics.num_rebalancer_errors == 0)
    assert len(crash_records(caplog)) == len(crashed)  # once per crash
    lines = [json.loads(x) for x in log.getvalue().splitlines()]
    assert [x["num_rebalancer_errors"] for x in lines] == [
        b.metrics.num_rebalancer_errors for b in batches]
    text = metrics.render().decode()
    assert f"tailsieve_rebalancer_errors_total {float(len(crashed))}" in text
