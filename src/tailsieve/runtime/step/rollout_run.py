"""A live rollout run into a folder: what ``tailsieve rollout`` does once its options are read.

::

    run = RolloutRun(num_steps=4)
    check_prompt_budget("prompts.jsonl", len(prompts), cfg, len(urls), run.num_steps)
    summary = await run_rollout(urls, cfg, prompts, Path("out"), run)

``run_rollout`` drives ``TailSieveRollout`` for ``num_steps`` steps (then a flush step), giving
each step the prompts it needs from a list in order, and writes ``DIR/batches/step_XXXX.jsonl``
(one row per delivered response), ``DIR/steps.jsonl`` (one ``StepMetrics`` per step) and
``DIR/summary.json`` (``rollout_summary``). Nothing is written before the replicas answer and
serve the model.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tailsieve.control.budget import PromptBudget, prompts_needed
from tailsieve.control.config import ControllerConfig
from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import Backend, PromptInput
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.transport import Transport
from tailsieve.runtime.step.observe import ProgressDisplay, RuntimeMetrics, StepLog, StepMetrics
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_batch import RolloutBatch
from tailsieve.runtime.step.rollout_config import RolloutConfig


@dataclass(frozen=True, slots=True)
class RolloutRun:
    """How a rollout run goes, beyond its ``RolloutConfig``."""

    num_steps: int  # steps to run (then a flush step when ``flush``)
    flush: bool = True  # drain the carried prompts at the end
    progress: bool = False  # a live table of each step on stderr
    metrics_port: int | None = None  # Prometheus /metrics on 127.0.0.1:port while it runs
    log_file: Path | None = None  # JSON step log, appended (None: stderr)

    def __post_init__(self) -> None:
        if self.num_steps < 0:
            raise ConfigError(f"num_steps must be >= 0, got {self.num_steps}")


def rollout_budget(cfg: RolloutConfig, num_replicas: int, num_steps: int) -> PromptBudget:
    """The most prompts ``num_steps`` steps of ``cfg`` on ``num_replicas`` replicas draw."""
    ccfg = ControllerConfig(
        num_groups=cfg.num_groups, num_replicas=num_replicas, group_size=cfg.group_size,
        **cfg.controller,
    )
    return prompts_needed(cfg.policy, ccfg, num_steps)


def check_prompt_budget(where: str, num_prompts: int, budget: PromptBudget, policy: str) -> None:
    """Refuse a run whose prompts (``num_prompts`` from ``where``) run out before its last step
    (see ``control.budget``); the error says how many it needs and how many steps fit."""
    if num_prompts >= budget.num_needed:
        return
    n, steps = budget.num_groups, budget.num_steps
    extra = (
        f" and up to {budget.max_extra} extra groups that the {policy} policy launches in the "
        "last step and delivers in the flush step"
        if budget.max_extra
        else ""
    )
    fit = max(0, (num_prompts - budget.max_extra) // n)
    raise ConfigError(
        f"{where} has {num_prompts} prompts; --groups {n} x --steps {steps} needs at least "
        f"{budget.num_needed}: {budget.num_delivered} delivered ({n} per step){extra}; give at "
        f"least {budget.num_needed} prompts or at most --steps {fit}"
    )


async def check_model(
    urls: Sequence[str], model: str | None, backend: Backend, transport: Transport | None = None
) -> None:
    """A given served ``model`` must be one the replicas list (the error names the replica);
    asked over ``transport`` (default: a new one, closed after)."""
    if model is None:
        return
    runner = HttpPieceRunner(urls, backend, transport=transport, health_timeout_s=10.0)
    try:
        await runner.models.check(model)
    finally:
        if transport is None:
            await runner.aclose()


async def run_rollout(
    urls: Sequence[str],
    cfg: RolloutConfig,
    source: Sequence[PromptInput],
    out: Path,
    run: RolloutRun,
    addresses: Callable[[], Sequence[str]] | None = None,
    warn: Callable[[str], None] | None = None,
    transport: Transport | None = None,
) -> dict[str, Any]:
    """Run ``run.num_steps`` steps (and a flush step) of ``cfg`` on ``urls`` with the prompts
    of ``source`` in order, writing into ``out``; returns the summary it wrote.
    ``addresses``: the replicas' current addresses (a launch state file's); ``warn``: told if
    the prompts run out before the last step (not expected once ``check_prompt_budget``
    passed); ``transport``: how requests go (default: a new ``LeanTransport``)."""
    await check_model(urls, cfg.model, cfg.backend, transport)
    metrics = RuntimeMetrics()
    display = ProgressDisplay() if run.progress else None
    batches: list[RolloutBatch] = []
    num_used = 0
    log_fh: IO[str] | None = None
    t0 = time.perf_counter()
    try:
        async with TailSieveRollout(
            urls, cfg, transport=transport, on_progress=display.update if display else None,
            metrics=metrics, addresses=addresses,
        ) as ro:
            # the replicas answer and serve the model: only now is anything written
            await _serve_metrics(metrics, run.metrics_port)
            (out / "batches").mkdir(parents=True, exist_ok=True)
            (out / "steps.jsonl").write_text("")
            log_fh = run.log_file.open("a") if run.log_file is not None else None
            ro.step_log = StepLog(log_fh or sys.stderr)
            if display:
                display.__enter__()
            for _ in range(run.num_steps):
                need = ro.num_fresh_needed()
                new = source[num_used : num_used + need]
                if len(new) < need:
                    if warn is not None:
                        warn(f"warning: prompts ran out after {len(batches)} steps: step "
                             f"{len(batches)} needs {need}, {len(new)} left")
                    break
                num_used += need
                batches.append(await ro.step(new))
                write_batch(out, batches[-1])
            if run.flush and (last := await ro.flush()) is not None:
                batches.append(last)
                write_batch(out, last)
    finally:
        if display:
            display.__exit__(None, None, None)
        if log_fh is not None:
            log_fh.close()
        await metrics.aclose()
    summary = rollout_summary(cfg, urls, [b.metrics for b in batches],
                              time.perf_counter() - t0, len(source), num_used)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


async def _serve_metrics(metrics: RuntimeMetrics, port: int | None) -> None:
    if port is None:
        return
    try:
        await metrics.serve(port)
    except OSError as exc:
        raise ConfigError(
            f"--metrics-port {port}: cannot listen ({exc.strerror or exc})"
        ) from None


def rollout_summary(
    cfg: RolloutConfig,
    urls: Sequence[str],
    ms: Sequence[StepMetrics],
    wall_s: float,
    num_prompts: int,
    num_used: int,
) -> dict[str, Any]:
    """``summary.json`` of a run whose steps recorded ``ms``: step times, tokens generated
    and wasted (split as ``StepMetrics`` splits them, each part with its bound), faults,
    moves, rebalancer crashes, q and m per step."""
    gen = sum(m.generated_tokens for m in ms)
    wasted = sum(m.wasted_tokens for m in ms)
    return {
        "policy": cfg.policy,
        "endpoints": list(urls),
        "num_steps": len(ms),
        "num_groups": cfg.num_groups,
        "group_size": cfg.group_size,
        "wall_s": wall_s,
        "total_makespan_s": sum(m.makespan_s for m in ms),
        "makespans_s": [m.makespan_s for m in ms],
        "steady_mean_makespan_s": _mean(
            [m.makespan_s for m in ms if m.step > 0 and not m.is_flush]
        ),
        "generated_tokens": gen,
        "wasted_tokens": wasted,
        "wasted_token_fraction": wasted / max(1, gen),
        "estimated_wasted_tokens": sum(m.estimated_wasted_tokens for m in ms),
        **{k: sum(getattr(m, k) for m in ms) for k in WASTE_KEYS},
        "num_regenerated": sum(m.num_regenerated for m in ms),
        "num_relocated": sum(m.num_relocated for m in ms),
        "moves": cfg.moves_active,
        "moves_off_reason": cfg.moves_off_reason,
        "num_moves": sum(m.num_moves for m in ms),
        "moves_per_step": _mean([float(m.num_moves) for m in ms if not m.is_flush]),
        "num_rebalancer_errors": sum(m.num_rebalancer_errors for m in ms),
        "q": [m.q for m in ms],
        "m": [m.m for m in ms],
        "num_delivered_groups": sum(m.num_groups for m in ms),
        "num_readmitted": max((m.num_readmitted for m in ms), default=0),
        "planned_replicas": [m.num_planned_replicas for m in ms],
        "num_prompts": num_prompts,
        "num_prompts_used": num_used,
    }


WASTE_KEYS = ("cutoff_wasted_tokens", "cutoff_estimated_tokens", "cutoff_max_tokens",
              "lost_exact_tokens", "lost_estimated_tokens", "lost_estimated_max_tokens",
              "num_lost_pieces")  # StepMetrics' split of wasted_tokens, summed in the summary


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def write_batch(out: Path, b: RolloutBatch) -> None:
    """``b``'s responses to ``out/batches/step_XXXX.jsonl``; its metrics appended to
    ``out/steps.jsonl``."""
    with (out / "batches" / f"step_{b.step:04d}.jsonl").open("w") as fh:
        for row in b.rows():
            fh.write(json.dumps(row) + "\n")
    with (out / "steps.jsonl").open("a") as fh:
        fh.write(b.metrics.to_json() + "\n")


__all__ = ["RolloutRun", "check_model", "check_prompt_budget", "rollout_budget",
           "rollout_summary", "run_rollout", "write_batch"]
