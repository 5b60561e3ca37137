"""``tailsieve agentic simulate``: multi-turn agentic rollouts in the simulator, every session
router against verl's default (docs/agentic-rollouts.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import DEFAULT_PROFILE

agentic_app = typer.Typer(
    name="agentic",
    help="Multi-turn agentic rollouts: session routers compared in the simulator.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the ``agentic`` sub-app to ``app``."""
    app.add_typer(agentic_app, name="agentic")


@agentic_app.command("simulate")
def simulate(
    preset: Annotated[str, typer.Option(
        "--preset", help="Agentic workload preset (search-agent, swe-agent, swe-agent-long, "
                         "math-code-agent).")] = "swe-agent",
    replicas: Annotated[int, typer.Option("--replicas", help="Replicas R.")] = 8,
    policies: Annotated[str, typer.Option(
        "--policies", help="Comma-separated policies (verl-sticky is always added as the "
                           "reference); default: every router and tailsieve, oracle.")] = "",
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
    slowdowns: Annotated[str, typer.Option(
        "--slowdowns", help="Comma-separated: replica r runs this many times slower (a "
                            "straggler, e.g. 1,1,4); replicas beyond at 1.")] = "",
) -> None:
    """Step time of each policy over verl's default (95% interval over seeds), prefix-cache
    hit rate, re-prefilled tokens and moves per step."""
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
    print(policy_table(res["policies"]))
    share = res["tailsieve_oracle_share"]
    if share is not None:
        print(f"TailSieve's share of the oracle's gain: {share:.0%}")
    if out is not None:
        out.write_text(json.dumps(res, indent=1))
