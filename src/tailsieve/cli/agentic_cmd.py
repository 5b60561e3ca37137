"""``tailsieve agentic simulate``: multi-turn agentic rollouts in the simulator, every session
router against verl's default (docs/agentic-rollouts.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tailsieve.cli import checks
from tailsieve.core.training_step import DEFAULT_ROLLOUT_SHARE, step_speedup
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import DEFAULT_PROFILE

agentic_app = typer.Typer(
    name="agentic",
    help="Multi-turn agentic rollouts: session routers compared in the simulator.",
    no_args_is_help=True,
)


@agentic_app.command("simulate")
def simulate(
    preset: Annotated[str, typer.Option(
        "--preset", help="Agentic workload preset (search-agent, swe-agent, swe-agent-long, "
                         "math-code-agent).")] = "swe-agent",
    replicas: Annotated[int, typer.Option("--replicas", help="Replicas R.")] = 8,
    policies: Annotated[str, typer.Option(
        "--policies", help="Comma-separated policies (verl-sticky is always added as the "
                           "reference); default: every router, tailsieve and length-informed.")] = "",
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds (paired).")] = 5,
    profile: Annotated[str, typer.Option(
        "--profile", help="Throughput profile (name or file).")] = DEFAULT_PROFILE,
    groups: Annotated[int, typer.Option("--groups", help="Groups per step.")] = 64,
    group_size: Annotated[int, typer.Option("--group-size", help="Trajectories per group.")] = 8,
    warmup_steps: Annotated[int, typer.Option(
        "--warmup-steps", help="Unmeasured steps (TailSieve's balance gate and estimates).")
    ] = 2,
    measured_steps: Annotated[int, typer.Option("--measured-steps", help="Measured steps.")] = 2,
    out: Annotated[Path | None, typer.Option("--out", help="Write the JSON result here.")] = None,
    rollout_share: checks.RolloutShare = DEFAULT_ROLLOUT_SHARE,
    slowdowns: Annotated[str, typer.Option(
        "--slowdowns", help="Comma-separated: replica r runs this many times slower (a "
                            "straggler, e.g. 1,1,4); replicas beyond at 1.")] = "",
) -> None:
    """Step time of each policy over verl's default (95% interval over seeds; and the training
    step's speedup at --rollout-share), prefix-cache hit rate, re-prefilled tokens and moves
    per step, and the step's lower bound (no router passes it) with the share of verl's gap to
    it that each policy closes."""
    share = checks.rollout_share(rollout_share)
    from tailsieve.sim.agentic.api import simulate_agentic
    from tailsieve.sim.agentic.policies import DEFAULT_POLICIES
    from tailsieve.sim.agentic.report import policy_table

    names = [p.strip() for p in policies.split(",") if p.strip()] or list(DEFAULT_POLICIES)
    try:
        slow = tuple(float(x) for x in slowdowns.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--slowdowns: numbers separated by commas, got {slowdowns!r}") from None
    res = simulate_agentic(preset, replicas, names, seeds, profile, groups, group_size,
                           warmup_steps, measured_steps, slow)
    print(f"{preset}, R = {replicas}, {profile}, {groups} x {group_size}, {seeds} seeds")
    print(policy_table(res["policies"], res["bound"]))
    print(training_step_line(res["policies"], share))
    gap_share = res["tailsieve_gap_share"]
    if not res["routing_bound"]:
        print("The bound gains at most 5% over verl's default: not routing-bound.")
    elif gap_share is not None:
        print(f"TailSieve closes {gap_share:.0%} of the gap between verl's step and the bound.")
    if out is not None:
        out.write_text(json.dumps(res, indent=1))


def training_step_line(rows: dict[str, dict[str, Any]], rollout_share: float) -> str:
    """Each policy's rollout speedup over verl's default with the training step's."""
    cells = ", ".join(f"{p} {r['speedup']:.3f}x -> {step_speedup(r['speedup'], rollout_share):.3f}x"
                      for p, r in rows.items() if r.get("speedup", 0) > 0)
    return (f"Training step where the rollout is {rollout_share:.2f} of it (--rollout-share), "
            f"rollout -> step over verl-sticky: {cells}")
