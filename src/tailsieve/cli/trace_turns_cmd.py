"""``tailsieve trace turns`` and ``tailsieve trace agentic``: inspect a turn trace (or a
single-turn trace as one-turn trajectories) and generate one from an agentic preset. The logic
lives in ``workload.turn_io``, ``workload.turn_stats`` and ``workload.agentic_presets``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tailsieve.cli import checks
from tailsieve.cli.trace_cmd import _show
from tailsieve.errors import ConfigError
from tailsieve.workload.agentic_presets import AGENTIC_PRESETS, agentic_preset
from tailsieve.workload.io import trace_suffix
from tailsieve.workload.turn_io import read_turn_trace, write_turn_trace
from tailsieve.workload.turn_stats import turn_trace_stats


def turns(
    file: Annotated[Path, typer.Argument(help="Turn trace (.jsonl[.gz], .csv[.gz], .parquet); a single-turn trace or aime / smollm2-math reads as one-turn trajectories.")],
    prompt_tokens: Annotated[
        int, typer.Option("--prompt-tokens", help="Prompt length for a file without a prompt_tokens column.")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Turns per trajectory, context, per-turn output and tool-call percentiles of a turn trace."""
    tt = read_turn_trace(file, default_prompt_tokens=prompt_tokens)
    _show(f"turn trace: {file}", {"source": str(file), **turn_trace_stats(tt)}, as_json)


def agentic(
    preset_name: Annotated[str, typer.Option("--preset", help=f"One of: {', '.join(AGENTIC_PRESETS)}.")],
    out: Annotated[Path, typer.Option("--out", help="Output turn trace (.jsonl, .csv, .parquet, .jsonl.gz, .csv.gz).")],
    groups: Annotated[int, typer.Option("--groups", help="Prompts (groups) per step.")] = 64,
    group_size: Annotated[int, typer.Option("--group-size", help="Trajectories per group (n).")] = 8,
    steps: Annotated[int, typer.Option("--steps", help="Rollout steps (fresh prompts each).")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Seed.")] = 0,
    group_correlation: Annotated[
        float | None,
        typer.Option("--group-correlation", help="Within-group share of turn-count and length variance, in [0, 1] [default: the preset's].")
    ] = None,
    max_context: Annotated[
        int | None, typer.Option("--max-context", help="Context cap in tokens [default: the preset's].")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Generate a multi-turn trace from a calibrated agentic preset and summarize it."""
    checks.output_files((out, "--out"))
    if not trace_suffix(out):
        raise ConfigError(f"{out}: unknown trace format; use .jsonl, .csv, .parquet, "
                          ".jsonl.gz or .csv.gz")
    preset = agentic_preset(preset_name)
    tt = preset.generate(
        groups, group_size, steps, seed,
        group_correlation=group_correlation, max_context_tokens=max_context,
    )  # fmt: skip
    write_turn_trace(tt, out)
    _show(f"agentic trace ({preset_name})",
          {"out": str(out), "preset": preset_name, "models": preset.description,
           "calibrated_to": preset.source, "seed": seed, **turn_trace_stats(tt)}, as_json)
