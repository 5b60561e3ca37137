"""``tailsieve trace``: inspect, synthesize, transform traces and measure partial-rollout capture.

Sub-commands: ``stats``, ``synth``, ``transform``, ``capture``. Bad input raises a
``TailSieveError`` that ``main`` prints as one ``error: ...`` line (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tailsieve.cli import checks
from tailsieve.errors import ConfigError, TraceError
from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.workload.capture import CaptureConfig
from tailsieve.workload.capture_run import CaptureRun, run_capture
from tailsieve.workload.io import read_trace, write_trace
from tailsieve.workload.presets import PRESETS, preset
from tailsieve.workload.summary import trace_stats
from tailsieve.workload.synthetic import SyntheticWorkload
from tailsieve.workload.transform import fit_tail_transform

trace_app = typer.Typer(
    name="trace",
    help="Length traces: stats, synthetic generation, tail-strength transform, capture rate.",
    no_args_is_help=True,
)


def _show(title: str, stats: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(stats, indent=2))
    else:
        _print_kv(title, stats)


def _print_kv(title: str, rows: dict[str, Any]) -> None:
    table = Table(title=title)
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for k, v in rows.items():
        if isinstance(v, float):
            text = f"{v:,.4f}" if abs(v) < 10 else f"{v:,.1f}"
        elif isinstance(v, int):
            text = f"{v:,}"
        else:
            text = str(v)
        table.add_row(k, text)
    Console().print(table)


@trace_app.command("stats")
def stats(
    file: Annotated[Path, typer.Argument(help="Trace file (.jsonl[.gz], .csv[.gz], .parquet) or aime / smollm2-math (shipped).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", help="Generation cap; lengths >= it count as truncated."),
    ] = None,
    top_fraction: Annotated[
        float, typer.Option("--top-fraction", help="Tail size for the AUC.")
    ] = 0.1,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a length-CDF figure (PNG/PDF).")
    ] = None,
    rank_plot: Annotated[
        Path | None,
        typer.Option(
            "--rank-plot", help="Multi-checkpoint: write per-prompt length ranks across steps."
        ),
    ] = None,
) -> None:
    """Length percentiles, truncation, variance shares and tail-ranking AUC of a trace."""
    checks.output_files((plot, "--plot"), (rank_plot, "--rank-plot"))
    trace = read_trace(file)
    out = trace_stats(trace, max_tokens=max_tokens, top_fraction=top_fraction)
    if plot is not None or rank_plot is not None:
        from tailsieve.workload.plots import plot_length_cdf, plot_rank_persistence

        if plot is not None:
            plot_length_cdf(trace, plot)
        if rank_plot is not None:
            if not trace.is_multi_checkpoint:
                raise TraceError(f"{file}: --rank-plot needs a multi-checkpoint trace")
            plot_rank_persistence(trace, rank_plot, top_fraction)
    if as_json:
        print(json.dumps(out, indent=2))
        return
    flat = {k: v for k, v in out.items() if not isinstance(v, dict | list)}
    _print_kv(f"trace stats: {file}", flat)


@trace_app.command("synth")
def synth(
    preset_name: Annotated[str, typer.Option("--preset", help=f"One of: {', '.join(PRESETS)}.")],
    out: Annotated[Path, typer.Option("--out", help="Output trace (.jsonl, .csv, .parquet).")],
    prompts: Annotated[int, typer.Option("--prompts", help="Number of prompts.")] = 1000,
    steps: Annotated[int, typer.Option("--steps", help="Number of steps (checkpoints).")] = 1,
    samples: Annotated[int, typer.Option("--samples", help="Responses per prompt per step.")] = 8,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed (prompt effects, drift, sampling).")
    ] = 0,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a figure (CDF; ranks if --steps > 1).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Generate a synthetic trace from a calibrated preset."""
    checks.output_files((out, "--out"), (plot, "--plot"))
    wl = SyntheticWorkload(preset(preset_name), num_prompts=prompts, seed=seed)
    trace = wl.generate_trace(steps, samples, seed=seed)
    write_trace(trace, out)
    if plot is not None:
        from tailsieve.workload.plots import plot_length_cdf, plot_rank_persistence

        (plot_rank_persistence if steps > 1 else plot_length_cdf)(trace, plot)
    summary = trace_stats(trace)
    keep = (
        "num_rows",
        "num_prompts",
        "num_steps",
        "p50",
        "p90",
        "p99",
        "max",
        "truncated_fraction",
        "prompt_variance_share",
        "prompt_variance_share_log",
        "tail_auc",
        "split_half_tail_auc",
    )
    flat = {"out": str(out), "preset": preset_name, **{k: summary[k] for k in keep if k in summary}}
    _show(f"synthetic trace ({preset_name})", flat, as_json)


@trace_app.command("transform")
def transform(
    file: Annotated[Path, typer.Argument(help="Input trace (or aime / smollm2-math, shipped).")],
    tail_strength: Annotated[
        str,
        typer.Option(
            "--tail-strength", help="Target P90/P50 ratio r > 1, or weak (1.5) / real / strong (6)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output trace.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Stretch or compress the upper half of the lengths so that P90/P50 = r (paper A.5)."""
    checks.output_files((out, "--out"))
    trace = read_trace(file)
    tf = fit_tail_transform(trace.response_tokens, tail_strength)
    new = trace.with_lengths(tf.apply(trace.response_tokens))
    write_trace(new, out)
    before, after = trace_stats(trace), trace_stats(new)
    info = {
        "out": str(out),
        "ratio": tf.ratio,
        "stretch": tf.stretch,
        "p50_before": before["p50"],
        "p90_before": before["p90"],
        "max_before": before["max"],
        "p50_after": after["p50"],
        "p90_after": after["p90"],
        "max_after": after["max"],
        "p90_over_p50_after": after["p90_over_p50"],
    }
    if as_json:
        print(json.dumps(info, indent=2))
    else:
        _print_kv(
            f"tail-strength transform: {file}", {k: v for k, v in info.items() if v is not None}
        )


@trace_app.command(
    "capture", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def capture(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="Trace file, aime / smollm2-math (shipped), or a preset name.")],
    rho: Annotated[
        list[float] | None,
        typer.Option(
            "--rho", help="Over-launch fractions, several after one --rho [0.05 0.10 0.25]."
        ),
    ] = None,
    replicas: Annotated[int, typer.Option("--replicas", help="R: inference replicas.")] = 8,
    groups: Annotated[int, typer.Option("--groups", help="N: groups the step needs.")] = 64,
    group_size: Annotated[int, typer.Option("--group-size", help="n: responses per group.")] = 8,
    profile: Annotated[
        str, typer.Option("--profile", help="Throughput profile (a name or a file).")
    ] = DEFAULT_PROFILE,
    rounds: Annotated[int, typer.Option("--rounds", help="Random rounds to average.")] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Seed.")] = 0,
    tail_metric: Annotated[
        str, typer.Option("--tail-metric", help="Group size: max or total.")
    ] = "max",
    prompts: Annotated[
        int, typer.Option("--prompts", help="Presets only: number of prompts.")
    ] = 1000,
    tail_fraction: Annotated[
        float | None,
        typer.Option(
            "--tail-fraction",
            help="Ground-truth tail = top fraction of launched groups [default: as many as candidates].",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write capture rate vs rho (paper Fig. 3).")
    ] = None,
) -> None:
    """Capture rate of ground-truth long-tail groups by the partial-rollout cutoff."""
    checks.output_files((plot, "--plot"))
    rhos = _rhos(rho, list(ctx.args))
    model = load_profile(profile)
    cfg = CaptureConfig(
        rhos=rhos, groups=groups, group_size=group_size,
        replicas=replicas, rounds=rounds, seed=seed, tail_metric=tail_metric,
        tail_fraction=tail_fraction,
    )  # fmt: skip
    run = run_capture(source, model, cfg, num_prompts=prompts)
    if plot is not None:
        from tailsieve.workload.plots import plot_capture

        plot_capture(run.results, plot, title=f"{Path(source).name}: N={groups}, R={replicas}")
    if as_json:
        print(json.dumps(run.to_dict(), indent=2))
        return
    _print_capture(run)


def _rhos(rho: list[float] | None, extra: list[str]) -> tuple[float, ...]:
    """The over-launch fractions: those of ``--rho`` and the values after it (default
    0.05, 0.10, 0.25)."""
    rhos = list(rho or [])
    for value in extra:
        try:
            rhos.append(float(value))
        except ValueError:
            raise ConfigError(f"capture: unexpected argument {value!r}") from None
    if extra and not rho:
        raise ConfigError(f"capture: unexpected arguments {' '.join(extra)}")
    return tuple(rhos) if rhos else (0.05, 0.10, 0.25)


def _print_capture(run: CaptureRun) -> None:
    table = Table(
        title=f"partial-rollout capture: {run.source} (profile {run.profile})",
        caption=f"next step: {run.method}",
        caption_justify="left",
    )
    for col in ("rho", "launched", "candidates", "same round", "next step", "top-1 same",
                "top-1 next", "random"):
        table.add_column(col, justify="right")
    for r in run.results:
        table.add_row(
            f"{r.rho:.0%}", str(r.launched_groups), str(r.candidates),
            f"{r.same_round_capture:.1%}", f"{r.cross_step_capture:.1%}",
            f"{r.same_round_top1:.1%}", f"{r.cross_step_top1:.1%}", f"{r.random_baseline:.1%}",
        )
    Console().print(table)
