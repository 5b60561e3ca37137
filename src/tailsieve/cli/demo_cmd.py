"""``tailsieve demo``: the embedded default job (emulated replicas; uniform, uniform-requests and tailsieve)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tailsieve.cli import checks
from tailsieve.core.training_step import DEFAULT_ROLLOUT_SHARE, step_speedup
from tailsieve.report.headline import headline_sentences
from tailsieve.report.html_report import write_report
from tailsieve.report.run_data import load_run
from tailsieve.runtime import event_loop
from tailsieve.runtime.demo import DemoConfig, PolicyResult, run_demo, summaries
from tailsieve.runtime.demo_real import RealDemoConfig, run_real_demo
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.step.observe import ProgressDisplay


def demo(
    out: Annotated[Path, typer.Option("--out", help="Run folder (report.html goes here).")] = Path(
        "demo-out"
    ),
    replicas: Annotated[
        int | None, typer.Option(help="Replicas (default 8 emulated; 2 with --real-model).")
    ] = None,
    groups: Annotated[
        int | None, typer.Option(help="Groups per batch, N (default 64; 8 with a real model).")
    ] = None,
    group_size: Annotated[
        int | None, typer.Option(help="Responses per group, n (default 8; 4 with a real model).")
    ] = None,
    steps: Annotated[
        int | None, typer.Option(help="Steps after the warm-up (default 10; 3 with a real model).")
    ] = None,
    workload: Annotated[str, typer.Option(help="Workload preset or trace file.")] = "paper-math",
    profile: Annotated[
        str, typer.Option(help="Throughput profile of the emulated replicas (tailsieve profiles).")
    ] = "qwen3-4b-h100",
    time_scale: Annotated[float, typer.Option(help="Emulated seconds per modelled second.")] = 0.05,
    seed: Annotated[int, typer.Option(help="Seed of workload and sampling.")] = 0,
    moves: Annotated[
        bool,
        typer.Option("--moves/--no-moves",
                     help="tailsieve moves running responses between replicas while a step "
                          "runs (continuation; docs/runtime.md)."),
    ] = True,
    backend: Annotated[
        Backend,
        typer.Option(help="API the router speaks to the emulated replicas: sglang (a move aborts "
                          "the running request, which returns its partial output) or vllm "
                          "(unstreamed pieces of 512 tokens; a move waits for the piece's end)."),
    ] = Backend.SGLANG,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Live progress table.")
    ] = True,
    real_model: Annotated[
        Path | None,
        typer.Option("--real-model", help="Run on real vLLM CPU servers serving this model "
                     "(e.g. .cache/smollm2-135m-instruct from scripts/setup_real_model.sh): "
                     "natural lengths, the shipped math word problems; a few minutes."),
    ] = None,
    endpoints: Annotated[
        str | None, typer.Option("--endpoints", help="Real-model demo on running vLLM servers "
                                 "(comma-separated URLs) instead of launching them."),
    ] = None,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", help="Real model: cap per response.")
    ] = 512,
    vllm_python: Annotated[
        str | None, typer.Option("--vllm-python", help="Real model: python of the vLLM venv "
                                 "(default $TAILSIEVE_VLLM_PYTHON, else .venv-vllm).")
    ] = None,
    rollout_share: checks.RolloutShare = DEFAULT_ROLLOUT_SHARE,
) -> None:
    """Start emulated replicas on 127.0.0.1, run a warm-up and STEPS steps with Uniform,
    per-request round-robin (uniform-requests) and TailSieve, interleaved step by step through
    the live runtime, print the comparison (each rollout speedup with the training step's at
    --rollout-share) and write an HTML report."""
    checks.output_dir(out)
    share = checks.rollout_share(rollout_share)
    if real_model is not None or endpoints:
        _real(out, real_model, endpoints, replicas, groups, group_size, steps, max_tokens,
              vllm_python, progress, share)
        return
    replicas, groups = replicas or 8, groups or 64
    group_size, steps = group_size or 8, steps or 10
    cfg = DemoConfig(
        moves=moves,
        backend=backend,
        replicas=replicas,
        groups=groups,
        group_size=group_size,
        steps=steps,
        workload=workload,
        profile=profile,
        time_scale=time_scale,
        seed=seed,
        out_dir=out,
    )
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    console.print(
        f"[bold]TailSieve demo[/bold]: {replicas} emulated replicas ({profile} profile, time "
        f"x{time_scale:g}, {backend.value} API, moves {'on' if moves else 'off'}), "
        f"{workload}, N={groups} groups x {group_size}, warm-up + {steps} steps per policy"
    )
    t0 = time.perf_counter()
    display = ProgressDisplay(Console(stderr=True)) if progress else None

    def on_policy(name: str) -> None:
        console.print(f"[bold]policies {name}, interleaved step by step[/bold]")

    if display is not None:
        with display:
            results = event_loop.run(
                run_demo(cfg, on_progress=display.update, on_policy=on_policy)
            )
    else:
        results = event_loop.run(run_demo(cfg, on_policy=on_policy))
    unit = (f"emulated s = seconds on the emulated replicas ({time_scale:g} x the modelled "
            f"{profile} seconds)")
    _print(console, out, results, "emulated replicas", "emulated s", unit, t0, share)


def _real(out: Path, model: Path | None, endpoints: str | None, replicas: int | None,
          groups: int | None, group_size: int | None, steps: int | None, max_tokens: int,
          python: str | None, progress: bool, share: float) -> None:
    """The demo on real vLLM servers serving a real model (``runtime.demo_real``)."""
    urls = tuple(u.strip() for u in (endpoints or "").split(",") if u.strip())
    cfg = RealDemoConfig(
        model_dir=None if urls else model, endpoints=urls, replicas=replicas or 2,
        groups=groups or 8, group_size=group_size or 4, steps=steps or 3,
        max_tokens=max_tokens, python=python, out_dir=out)
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    where = ", ".join(urls) if urls else f"{cfg.replicas} vLLM CPU servers for {model}"
    console.print(f"[bold]TailSieve demo on a real model[/bold]: {where}; the shipped math word "
                  f"problems, N={cfg.groups} groups x {cfg.group_size}, temperature 1, up to "
                  f"{max_tokens} tokens, warm-up + {cfg.steps} steps per policy")
    t0 = time.perf_counter()

    def stage(text: str) -> None:
        console.print(f"[bold]{text}[/bold]")

    display = ProgressDisplay(Console(stderr=True)) if progress else None
    if display is not None:
        with display:
            results = event_loop.run(run_real_demo(cfg, display.update, stage))
    else:
        results = event_loop.run(run_real_demo(cfg, on_stage=stage))
    unit = ("s = wall seconds on the real servers; each policy samples its own responses to "
            "the same prompts (natural lengths), so a paired ratio also holds sampling noise")
    _print(console, out, results, "real vLLM servers, real model", "s", unit, t0, share)


def _print(console: Console, out: Path, results: dict[str, PolicyResult], where: str,
           seconds: str, unit: str, t0: float, share: float) -> None:
    """The comparison table, the headline in words, and the report; every rollout speedup
    with the training step's at rollout share ``share``."""
    rows = summaries(results)
    paired_cols = _steps_label(next((s["paired_steps"] for s in rows if s["paired_steps"]), []))
    table = Table(
        title="Uniform, per-request round-robin (uniform-requests) and TailSieve "
              f"(live runtime, {where})",
        caption=f"{unit}; paired "
                f"speedup = mean of per-step reference/policy step-time ratios over "
                f"{paired_cols}, reference uniform or uniform-requests (what a per-request load "
                f"balancer already does); last 3 = the paper's steady column; in brackets: the "
                f"training step's speedup where the rollout is {share:.2f} of the step "
                f"(--rollout-share)",
        caption_justify="left",
    )
    speedups = ("over uniform", "over uniform-requests", "last 3")
    for col in ("policy", f"mean step ({seconds})", *speedups, "moves / step",
                "q over steps", "m over steps", "tokens wasted"):
        table.add_column(col, no_wrap=col in speedups or col == "policy")
    for s in rows:
        table.add_row(
            s["policy"],
            f"{s['mean_step_s']:.2f}",
            _x(s["paired_speedup"], share),
            _x(s["paired_speedup_vs_requests"], share),
            _x(s["speedup_vs_uniform"], share),
            f"{s['moves_per_step']:.0f}",
            " ".join(map(str, s["q_trajectory"])),
            " ".join(map(str, s["m_trajectory"])),
            f"{100 * s['wasted_token_fraction']:.1f}%",
        )
    console.print(table)
    for sentence in headline_sentences(load_run(out), share):
        console.print(sentence, highlight=False)
    page = write_report(out, rollout_share=share)
    console.print(f"report: {page}   ({time.perf_counter() - t0:.0f} s in all)")


def _steps_label(steps: list[int]) -> str:
    if not steps:
        return "no steps"
    return f"steps {steps[0]}-{steps[-1]}, {len(steps)} steps" if len(steps) > 1 \
        else f"step {steps[0]}"


def _x(v: float | None, share: float) -> str:
    """A rollout speedup and, in brackets, the training step's at ``share``."""
    return "-" if v is None or v <= 0 else f"{v:.3f}x ({step_speedup(v, share):.3f}x)"
