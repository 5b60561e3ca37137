"""``runtime.step.rollout_run``, what ``tailsieve rollout`` runs once its options are read, called
directly over the stub transport: the files it writes, the summary as a function of the step
records (the waste split summed, each part with its bound), the prompt budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailsieve.control.budget import PromptBudget, prompts_needed
from tailsieve.control.config import ControllerConfig
from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.step.observe import StepMetrics
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.step.rollout_run import (
    WASTE_KEYS,
    RolloutRun,
    check_prompt_budget,
    rollout_budget,
    rollout_summary,
    run_rollout,
)
from tailsieve.runtime.stub import StubTransport

URLS = [f"http://r{i}" for i in range(3)]
TABLE = {f"p{i}": 10 + (i * 37) % 150 for i in range(60)}


def config(**kw: object) -> RolloutConfig:
    base: dict[str, object] = dict(num_groups=4, group_size=2, model="stub", profile="cpu",
                                   sampling=SamplingParams(max_tokens=500, seed=0))
    base.update(kw)
    return RolloutConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True])
async def test_run_rollout_writes_batches_steps_and_a_summary_of_them(
    tmp_path: Path, stream: bool
) -> None:
    stub = StubTransport(lambda p, s: TABLE[p] + 3 * s, seconds_per_token=0.0002)
    cfg = config(stream=stream)
    source = [PromptInput(p, text=p) for p in TABLE]
    warned: list[str] = []
    summary = await run_rollout(URLS, cfg, source, tmp_path, RolloutRun(num_steps=3),
                                transport=stub, warn=warned.append)
    assert warned == []
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    steps = [json.loads(x) for x in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == summary["num_steps"] >= 3  # three steps, then a flush if carried
    assert [s["step"] for s in steps] == list(range(len(steps)))
    seen = []
    for s in steps:
        rows = [json.loads(x) for x in
                (tmp_path / "batches" / f"step_{s['step']:04d}.jsonl").read_text().splitlines()]
        assert len(rows) == s["num_groups"] * cfg.group_size
        seen += [r["prompt_id"] for r in rows if r["sample"] == 0]
        for r in rows:
            assert r["response_tokens"] == TABLE[r["prompt_id"]] + 3 * r["sample"]
        # the waste split adds up, each estimate within its bound
        assert s["wasted_tokens"] == (s["cutoff_wasted_tokens"] + s["lost_exact_tokens"]
                                      + s["lost_estimated_tokens"])
        assert s["cutoff_wasted_tokens"] <= s["cutoff_max_tokens"]
        assert s["lost_estimated_tokens"] <= s["lost_estimated_max_tokens"]
        assert s["estimated_wasted_tokens"] == (s["cutoff_estimated_tokens"]
                                                + s["lost_estimated_tokens"])
        if stream:
            assert s["estimated_wasted_tokens"] == 0
    assert len(seen) == len(set(seen)) == summary["num_delivered_groups"]  # each prompt once
    assert set(seen) <= set(TABLE)
    assert summary["num_prompts"] == len(source) and summary["num_prompts_used"] <= len(source)
    for key in WASTE_KEYS:
        assert summary[key] == sum(s[key] for s in steps)
    assert summary["wasted_tokens"] == sum(s["wasted_tokens"] for s in steps)
    assert summary["num_rebalancer_errors"] == 0
    assert stub.log.broken_chains == []


async def test_run_rollout_warns_when_the_prompts_run_out(tmp_path: Path) -> None:
    """Not expected once ``check_prompt_budget`` passed: said, and the run stops early."""
    stub = StubTransport(lambda p, s: 20, seconds_per_token=0.0001)
    source = [PromptInput(p, text=p) for p in list(TABLE)[:6]]
    warned: list[str] = []
    summary = await run_rollout(URLS, config(policy="uniform"), source, tmp_path,
                                RolloutRun(num_steps=3, flush=False), transport=stub,
                                warn=warned.append)
    assert warned == ["warning: prompts ran out after 1 steps: step 1 needs 4, 2 left"]
    assert summary["num_steps"] == 1 and summary["num_prompts_used"] == 4


def metrics(step: int, makespan_s: float, flush: bool = False, **kw: int) -> StepMetrics:
    return StepMetrics(step=step, policy="tailsieve", num_groups=4, q=1, m=1,
                       makespan_s=makespan_s, tail_time_s=1.0, bulk_cut_s=1.0, wall_s=2.0,
                       num_launched=5, num_aborted=1, num_regenerated=0,
                       generated_tokens=kw.pop("generated", 1000),
                       wasted_tokens=kw.pop("wasted", 0), delivered_tokens=900,
                       num_carried_next=1, num_healthy_replicas=3, is_flush=flush, **kw)


def test_rollout_summary_sums_the_step_records() -> None:
    ms = [
        metrics(0, 4.0, cutoff_wasted_tokens=50, cutoff_max_tokens=80, wasted=50),
        metrics(1, 2.0, wasted=30, lost_exact_tokens=10, lost_estimated_tokens=20,
                lost_estimated_max_tokens=64, num_lost_pieces=2, num_rebalancer_errors=1),
        metrics(2, 3.0, flush=True),
    ]
    s = rollout_summary(config(), URLS, ms, wall_s=12.5, num_prompts=20, num_used=12)
    assert s["num_steps"] == 3 and s["makespans_s"] == [4.0, 2.0, 3.0]
    assert s["total_makespan_s"] == pytest.approx(9.0)
    assert s["steady_mean_makespan_s"] == pytest.approx(2.0)  # step 0 and the flush left out
    assert s["wasted_tokens"] == 80 and s["wasted_token_fraction"] == pytest.approx(80 / 3000)
    assert (s["cutoff_wasted_tokens"], s["cutoff_max_tokens"]) == (50, 80)
    assert (s["lost_exact_tokens"], s["lost_estimated_tokens"],
            s["lost_estimated_max_tokens"], s["num_lost_pieces"]) == (10, 20, 64, 2)
    assert s["num_rebalancer_errors"] == 1
    assert s["endpoints"] == URLS and s["num_prompts_used"] == 12
    empty = rollout_summary(config(), URLS, [], 0.0, 0, 0)
    assert empty["num_steps"] == 0 and empty["steady_mean_makespan_s"] is None


def test_the_prompt_budget_is_the_controllers_and_a_short_source_is_refused() -> None:
    cfg = config(num_groups=16, controller={"q0": 2})
    budget = rollout_budget(cfg, num_replicas=3, num_steps=4)
    ccfg = ControllerConfig(num_groups=16, num_replicas=3, group_size=2, q0=2)
    assert budget == prompts_needed("tailsieve", ccfg, 4)
    check_prompt_budget("p.jsonl", budget.num_needed, budget, "tailsieve")  # exactly enough
    with pytest.raises(ConfigError, match=r"p.jsonl has 40 prompts; --groups 16 x --steps 4 "
                                          r"needs at least \d+: 64 delivered"):
        check_prompt_budget("p.jsonl", 40, budget, "tailsieve")
    flat = PromptBudget(num_steps=4, num_groups=16, max_extra=0)
    with pytest.raises(ConfigError, match="give at least 64 prompts or at most --steps 2"):
        check_prompt_budget("p.jsonl", 40, flat, "uniform")


def test_a_run_of_negative_steps_is_refused() -> None:
    with pytest.raises(ConfigError, match="num_steps must be >= 0"):
        RolloutRun(num_steps=-1)
