"""``tailsieve oracle`` and ``tailsieve oracle-sweep``: the exact 2-replica optimum, the
top-k sweep and the best-k gap study (docs/design.md, "Offline oracle", paper Figure 2 and A.4)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from tailsieve.cli import checks
from tailsieve.errors import ConfigError, TraceError
from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.oracle.pareto_dp import OptimalSplit
from tailsieve.oracle.summary import (
    GapStudy,
    OracleSummary,
    gap_study,
    sample_requests,
    summarize,
)
from tailsieve.oracle.topk import TopKSweep


def parse_lengths(text: str) -> np.ndarray:
    """``"100,200,..."`` -> array; rejects empty, non-numeric and negative entries."""
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise TraceError("--lengths is empty; give comma-separated token counts, e.g. 100,200")
    out = []
    for i, item in enumerate(items):
        try:
            value = float(item)
        except ValueError:
            raise TraceError(f"--lengths entry {i + 1}: {item!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise TraceError(f"--lengths entry {i + 1}: {item!r} must be a finite number >= 0")
        out.append(value)
    return np.array(out)


def trace_columns(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """``response_tokens`` and, when the trace has it, ``prompt_tokens`` (context under the
    profile's context term)."""
    from tailsieve.workload.io import read_trace

    trace = read_trace(path)
    if trace.num_rows == 0:
        raise TraceError(f"{path}: the trace has no rows")
    prompts = None
    if trace.prompt_tokens is not None:
        prompts = np.asarray(trace.prompt_tokens, dtype=np.float64)
    return np.asarray(trace.response_tokens, dtype=np.float64), prompts


def _input_lengths(
    trace: Path | None, lengths: str | None, sample: int, seed: int, prompts: str | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    if (trace is None) == (lengths is None):
        raise ConfigError("give exactly one of --trace FILE or --lengths 100,200,...")
    if lengths is not None:
        arr = parse_lengths(lengths)
        if prompts is None:
            return arr, None
        ptoks = parse_lengths(prompts)
        if ptoks.size != arr.size:
            raise ConfigError(f"--prompts has {ptoks.size} entries, --lengths {arr.size}")
        return arr, ptoks
    assert trace is not None
    if prompts is not None:
        raise ConfigError("--prompts goes with --lengths; a trace's prompt_tokens column is used")
    resp, trace_prompts = trace_columns(trace)
    idx = sample_requests(np.arange(resp.size), sample, np.random.default_rng(seed)).astype(int)
    return resp[idx], None if trace_prompts is None else trace_prompts[idx]


def oracle(
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Trace file (JSONL/CSV/Parquet) or a shipped one: aime, smollm2-math.")
    ] = None,
    lengths: str = typer.Option(None, "--lengths", help="Inline lengths: 100,200,..."),
    prompts: str = typer.Option(
        None, "--prompts", help="Prompt tokens per --lengths entry (context under the profile's "
        "context term; a trace's prompt_tokens column is read by itself)."),
    sample_requests_n: int = typer.Option(
        100, "--sample-requests", help="Requests drawn from the trace (0 = all rows)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the draw from the trace."),
    profile: str = typer.Option(DEFAULT_PROFILE, "--profile",
                                help="Throughput profile name (tailsieve profiles) or FILE."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write the Figure-2 style plot (PNG/PDF).")
    ] = None,
) -> None:
    """Exact optimum vs best top-k vs uniform for routing requests onto 2 replicas."""
    checks.output_files((plot, "--plot"))
    model = load_profile(profile)
    arr, ptoks = _input_lengths(trace, lengths, sample_requests_n, seed, prompts)
    summary, opt, sweep = summarize(arr, model, ptoks)
    if plot is not None:
        draw_figure2(arr, opt, sweep, summary, plot)
    if as_json:
        print(json.dumps(summary.to_dict(), indent=2))
        return
    _print_summary(summary)


def oracle_sweep(
    trace: Annotated[Path, typer.Option("--trace", help="Trace file (JSONL/CSV/Parquet) or a shipped one: aime, smollm2-math.")],
    draws: int = typer.Option(100, "--draws", help="Random draws."),
    sample_requests_n: int = typer.Option(100, "--sample-requests", help="Requests per draw."),
    seed: int = typer.Option(0, "--seed", help="Seed of the draws."),
    profile: Annotated[
        list[str] | None, typer.Option("--profile", help="Profile (repeatable): a name (tailsieve profiles) or FILE.")
    ] = None,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Best-k gap to the exact optimum over random draws (paper appendix A.4)."""
    models = [load_profile(p) for p in (profile or [DEFAULT_PROFILE])]
    if sample_requests_n < 1:
        raise ConfigError(f"--sample-requests must be >= 1, got {sample_requests_n}")
    pool, prompt_pool = trace_columns(trace)
    studies = [
        gap_study(pool, m, draws, sample_requests_n, np.random.default_rng(seed), prompt_pool)
        for m in models
    ]
    if as_json:
        print(json.dumps([s.to_dict() for s in studies], indent=2))
        return
    _print_studies(studies)


def _print_summary(s: OracleSummary) -> None:
    table = Table(title=f"2-replica oracle, {s.num_requests} requests, profile '{s.profile}'")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [
        ("uniform (alternating) makespan", f"{s.uniform_makespan_s:.3f} s"),
        ("exact optimal makespan", f"{s.optimal_makespan_s:.3f} s"),
        ("best top-k makespan", f"{s.topk_makespan_s:.3f} s (k = {s.best_k})"),
        ("top-k gap to optimum", f"{100 * s.topk_gap:.2f} %"),
        ("uniform / optimal", f"{s.uniform_makespan_s / s.optimal_makespan_s:.3f}x"),
        ("lower bound", f"{s.lower_bound_s:.3f} s"),
        ("DP retained states", f"{s.retained_states:,}"),
        ("solve time", f"{s.solve_s:.3f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


def _print_studies(studies: list[GapStudy]) -> None:
    table = Table(title="best top-k gap to the exact 2-replica optimum (paper A.4)")
    for col in ("profile", "draws", "requests", "median", "P90", "max", "median solve"):
        table.add_column(col, justify="right")
    for s in studies:
        table.add_row(
            s.profile,
            str(s.num_draws),
            str(s.num_requests),
            f"{100 * s.gap_median:.2f} %",
            f"{100 * s.gap_p90:.2f} %",
            f"{100 * s.gap_max:.2f} %",
            f"{s.solve_s_median:.3f} s",
        )
    Console().print(table)


def draw_figure2(
    lengths: np.ndarray, opt: OptimalSplit, sweep: TopKSweep, s: OracleSummary, path: Path
) -> None:
    """(a) the optimal assignment as horizontal bars per replica; (b) tail and bulk replica
    makespans versus k with the optimum and best k marked."""
    from tailsieve.workload.plots import pyplot

    plt = pyplot()
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(12, 4.8))
    y = 0
    colors = ("tab:blue", "tab:orange")
    for r, name in enumerate(("A", "B")):
        mine = np.sort(lengths[opt.assignment == r])[::-1]
        ys = np.arange(y, y + mine.size)
        ax_a.barh(ys, mine, color=colors[r], height=0.8, label=f"replica {name}")
        mid = y + mine.size / 2
        ax_a.annotate(
            f"replica {name}: {opt.replica_times_s[r]:.2f} s",
            xy=(float(mine.max()) if mine.size else 0.0, mid),
            xytext=(5, 0),
            textcoords="offset points",
            va="center",
        )
        y += mine.size + 2
    ax_a.invert_yaxis()
    ax_a.set_xlabel("response length (tokens)")
    ax_a.set_yticks([])
    ax_a.set_title(f"(a) exact optimum: makespan {opt.makespan_s:.2f} s")
    ax_a.legend(loc="lower right")
    ks = np.arange(sweep.tail_s.size)
    ax_b.plot(ks, sweep.tail_s, label="tail replica (k longest)")
    ax_b.plot(ks, sweep.bulk_s, label="bulk replica (the rest)")
    ax_b.plot(ks, sweep.makespan_s, "k:", label="top-k makespan")
    ax_b.axhline(opt.makespan_s, color="tab:red", ls="--", label=f"optimum {opt.makespan_s:.2f} s")
    ax_b.axvline(sweep.best_k, color="gray", ls="-.", label=f"best k = {sweep.best_k}")
    ax_b.set_xlabel("k (requests isolated on the tail replica)")
    ax_b.set_ylabel("replica time (s)")
    ax_b.set_title(f"(b) top-k sweep, gap {100 * s.topk_gap:.2f} % ({s.profile} profile)")
    ax_b.set_ylim(0, float(sweep.makespan_s.max()) * 1.05)
    ax_b.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot write plot {path}: {exc}") from None
    finally:
        plt.close(fig)
