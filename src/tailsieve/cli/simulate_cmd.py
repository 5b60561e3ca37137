"""``tailsieve simulate``: paired multi-step simulation of routing policies (paper Table 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tailsieve.cli import checks
from tailsieve.core.training_step import DEFAULT_ROLLOUT_SHARE, step_speedup
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import DEFAULT_PROFILE
from tailsieve.sim.api import simulate as run_simulation
from tailsieve.sim.driver import ALL_POLICIES
from tailsieve.sim.speedup_stats import STEADY_FROM, SpeedupStat

_POLICY_HELP = (
    "Repeatable; default all: " + ", ".join(ALL_POLICIES)
    + ". Also tailsieve-static: (q, m) held at (--q0, --m0)."
)


def simulate(
    workload: str = typer.Option("paper-math", "--workload", help="Preset (paper-math, aime-r1), "
                                 "'aime' (real AIME trace, resampled), 'smollm2-math' (real "
                                 "SmolLM2 trace, two epochs replayed) or a trace file."),
    replicas: int = typer.Option(8, "--replicas", help="R: inference replicas."),
    groups: int = typer.Option(64, "--groups", help="N: groups per step."),
    group_size: int = typer.Option(8, "--group-size", help="n: responses per group."),
    steps: int = typer.Option(20, "--steps", help="Steps per policy (warm-up included)."),
    policy: Annotated[
        list[str] | None, typer.Option("--policy", help=_POLICY_HELP)
    ] = None,
    profile: str = typer.Option(DEFAULT_PROFILE, "--profile",
                                help="Throughput profile name or file (tailsieve profiles)."),
    seed: int = typer.Option(0, "--seed", help="Seed of prompt order and length draws."),
    seeds: int = typer.Option(1, "--seeds", help="Seeds seed .. seed+K-1 for the paired "
                              "statistic with its 95% interval (tables show the first seed)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    tail_spec: str = typer.Option("none", "--tail-spec", help="Tail pool speculation, e.g. mtp:3."),
    bulk_spec: str = typer.Option("none", "--bulk-spec", help="Bulk pool speculation."),
    q0: int = typer.Option(None, "--q0", help="Controller's initial tail groups (default 1)."),
    m0: int = typer.Option(None, "--m0", help="Controller's initial tail replicas (default 0 "
                           "with spread: balance first; 1 with --whole-groups)."),
    spread: bool = typer.Option(True, "--spread/--whole-groups", help="Deal single responses "
                                "over a pool's replicas (default) or whole groups (the paper)."),
    tail_strength: str = typer.Option(
        None, "--tail-strength", help="weak | real | strong | r (P90/P50 of the lengths)."),
    max_num_seqs: int = typer.Option(
        None, "--max-num-seqs", help="Running cap per replica (default: the profile's; 0 = none)."),
    kv_capacity: int = typer.Option(
        None, "--kv-capacity",
        help="KV-cache tokens per replica; when full the newest request is preempted and "
             "recomputed (default: the profile's; 0 = unlimited)."),
    prefill_s: float = typer.Option(0.0, "--prefill-s", help="Prefill stall per request (s)."),
    num_prompts: int = typer.Option(1000, "--num-prompts", help="Prompts of a synthetic preset."),
    piece_tokens: int = typer.Option(
        None, "--piece-tokens",
        help="Moved responses run as pieces of at most this many tokens, as the live runtime's "
             "--continuation --piece-tokens does (default: one piece until moved)."),
    piece_seam_s: float = typer.Option(
        0.05, "--piece-seam-s", help="Wait at each piece end on the same replica (s)."),
    piece_moves: str = typer.Option(
        "defer", "--piece-moves",
        help="defer: a move waits for the running piece's end, as the live runtime on vLLM "
             "does; drop: it cuts the piece, whose tokens are decoded again."),
    stream_interval: int = typer.Option(
        None, "--stream-interval",
        help="Moves as the live runtime's --stream --stream-interval K makes them on vLLM: at "
             "once, keeping the tokens streamed in chunks of K (the rest decoded again)."),
    drain_lpt: bool = typer.Option(
        True, "--drain-lpt/--no-drain-lpt",
        help="In a balanced step's drain, move the responses expected to run longest (from "
             "their tokens so far and recent steps' lengths) onto the replicas expected to "
             "finish first (docs/balancer.md#the-drain)."),
    drain_priority: bool = typer.Option(
        False, "--drain-priority",
        help="Submit each piece with an engine priority by its tokens so far, as vLLM's "
             "--scheduling-policy priority reads it (docs/balancer.md#the-drain)."),
    spec: str = typer.Option(
        None, "--spec",
        help="Acceptance preset (seer, tlt-eagle-tree, rhymerl-epoch, low, measured "
             "NAME:SOURCE, or FILE.json:SOURCE): simulate speculation placed by TailSieve "
             "against uniform-requests with the same speculation on every replica "
             "(docs/speculation-placement.md); --policy, --tail-spec/--bulk-spec are ignored."),
    spec_price: float = typer.Option(
        1.0, "--spec-price", help="With --spec: multiply speculation's extra step cost."),
    colocate: str = typer.Option(
        "auto", "--colocate", help="With --spec: deal groups spread, whole (group) or as the "
                                   "measured warm-up steps say (auto)."),
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write PNG plots into this folder.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write simulate.json into this folder.")
    ] = None,
    rollout_share: checks.RolloutShare = DEFAULT_ROLLOUT_SHARE,
) -> None:
    """Simulate policies on the same prompts and lengths; report steady step time, speedup
    over uniform routing (and the training step's at --rollout-share), controller trajectory,
    wasted tokens and ratio to the lower bound."""
    share = checks.rollout_share(rollout_share)
    for flag, v, low in (("--seeds", seeds, 1), ("--max-num-seqs", max_num_seqs, 0),
                         ("--kv-capacity", kv_capacity, 0), ("--piece-tokens", piece_tokens, 1),
                         ("--stream-interval", stream_interval, 1)):
        if v is not None and v < low:
            raise ConfigError(f"{flag} must be >= {low}" + (" (0 = off)" if low == 0 else "")
                              + f", got {v}")
    for folder, flag in ((out, "--out"), (plot, "--plot")):
        if folder is not None:
            checks.output_dir(folder, flag)
    if spec is not None:
        from tailsieve.cli.spec_sim import run_spec_cli

        run_spec_cli(workload, spec, spec_price, colocate, replicas, groups, group_size, steps,
                     profile, seed, seeds, tail_strength, as_json, out, share)
        return
    result = run_simulation(
        workload, policies=policy, replicas=replicas, groups=groups, group_size=group_size,
        steps=steps, profile=profile, seed=seed, seeds=seeds, q0=q0, m0=m0, spread=spread,
        tail_strength=tail_strength, tail_spec=tail_spec, bulk_spec=bulk_spec,
        max_num_seqs=max_num_seqs, kv_capacity_tokens=kv_capacity, prefill_s=prefill_s,
        num_prompts=num_prompts, piece_tokens=piece_tokens, piece_seam_s=piece_seam_s,
        piece_moves=piece_moves,  # type: ignore[arg-type,unused-ignore]
        stream_interval=stream_interval, drain_lpt=drain_lpt, drain_priority=drain_priority,
    )
    if out is not None:
        result.write(out)
    if plot is not None:
        result.plot(plot)
    if as_json:
        print(json.dumps({**result.to_dict(), "diagnostics": result.diagnostics()}, indent=2))
        return
    _print_table(result.settings, list(result.summaries.values()), share)


def _paired_or_steady(s: dict[str, Any]) -> float:
    """The policy's paired speedup over uniform (its mean) where there is one, else its
    steady one."""
    st = s.get("paired_stat")
    return float(st["mean"]) if isinstance(st, dict) else float(s["speedup_vs_uniform"])


def _print_table(meta: dict[str, Any], summaries: list[dict[str, Any]],
                 rollout_share: float = DEFAULT_ROLLOUT_SHARE) -> None:
    table = Table(
        title=(f"Simulated routing: {meta['workload']} (tail {meta['tail_strength']}), "
               f"R={meta['replicas']}, N={meta['groups']}x{meta['group_size']}, "
               f"profile {meta['profile']}, tail spec {meta['tail_spec']}, "
               f"bulk spec {meta['bulk_spec']}"),
        caption="steady = mean of the last 3 steps; speedups paired against uniform; "
                f"paired = mean per-step ratio over steps >= {STEADY_FROM} "
                f"({meta['seeds']} seed(s); 95% t-interval over seeds); "
                "LB ratio = step time / lower bound of the delivered batch, mean over steps; "
                "capture = share of each step's q longest groups caught by the previous cutoff; "
                f"step = the training step's speedup from paired (else speedup) where the "
                f"rollout is {rollout_share:.2f} of the step (--rollout-share); "
                "preempt = KV-capacity preemptions per step; moves = responses moved by "
                "continuation per step (prefill s per step)",
        caption_justify="left",
    )
    table.add_column("policy", no_wrap=True)
    preempt = any(s["preemptions_per_step"] > 0 for s in summaries)
    moves = any(s.get("moves_per_step", 0) > 0 for s in summaries)
    cols = ("steady s", "speedup", "mean spd", "paired", "step", "LB ratio", "wasted", *(
        ("preempt",) if preempt else ()), *(("moves",) if moves else ()), "capture", "q", "m")
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True)
    for s in summaries:
        qs, ms = s["q_trajectory"], s["m_trajectory"]
        st, cap = s.get("paired_stat"), s["diagnostics"]["capture_rate"]
        paired = "-" if st is None else SpeedupStat(**{**st, "per_seed": ()}).label()
        table.add_row(
            s["policy"], f"{s['steady_step_s']:.2f}", f"{s['speedup_vs_uniform']:.3f}x",
            f"{s['mean_speedup_vs_uniform']:.3f}x", paired,
            f"{step_speedup(_paired_or_steady(s), rollout_share):.3f}x",
            f"{s['lower_bound_ratio']:.3f}",
            f"{100 * s['wasted_token_fraction']:.1f}%",
            *((f"{s['preemptions_per_step']:.1f}",) if preempt else ()),
            *((f"{s['moves_per_step']:.0f} ({s['prefill_s_per_step']:.1f} s)",) if moves else ()),
            "-" if cap is None else f"{100 * cap:.0f}%", str(qs[-1] if qs else "-"),
            str(ms[-1] if ms else "-"),
        )
    add_fluid_bound_row(table, summaries)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)
    console.print(fluid_bound_line(summaries), highlight=False)


def add_fluid_bound_row(table: Table, summaries: list[dict[str, Any]]) -> None:
    """A last row under the policies and oracles: the fluid perfect-balance bound of the
    baselines' batches (steady) and the most any placement could gain over uniform."""
    base = next((s for s in summaries if s["policy"] == "uniform"), summaries[0])
    bound = base["steady_fluid_bound_s"]
    gain = f"<= {base['steady_step_s'] / bound:.3f}x" if bound > 0 else "-"
    table.add_row("fluid bound", f"{bound:.2f}", gain,
                  *([""] * (len(table.columns) - 3)), style="italic")


def fluid_bound_line(summaries: list[dict[str, Any]]) -> str:
    """The fluid perfect-balance bound summed over the regular steps, and per policy the
    summed step time over the summed bound of the batches it delivered (>= 1)."""
    base = next((s for s in summaries if s["policy"] == "uniform"), summaries[0])
    ratios = ", ".join(f"{s['policy']} {s['fluid_bound_ratio']:.3f}" for s in summaries)
    return (f"fluid bound = no placement of the delivered responses, free moves included, is "
            f"faster (docs/simulator.md): summed {base['fluid_bound_total_s']:.1f} s over "
            f"{base['num_steps']} steps (uniform {base['step_total_s']:.1f} s); summed step "
            f"time / bound: {ratios}")
