"""``tailsieve record``: record real rollouts into a trace, and write the math prompt set.

Sub-commands: ``run`` (groups on live servers -> trace with token ids), ``join`` (a recording
made in parts, one epoch per run, into one trace) and ``prompts`` (the seeded math word problems
as JSONL). Bad input raises a ``TailSieveError`` that ``main`` prints
as one ``error: ...`` line (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from tailsieve.cli import checks
from tailsieve.errors import ConfigError
from tailsieve.record.math_problems import SHIPPED_PER_LEVEL, SHIPPED_SEED, generate, write_problems
from tailsieve.record.parts import join_parts, read_recording
from tailsieve.record.recorder import RecordConfig, Recording, StepRecord, record
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.prompt_file import read_prompt_set
from tailsieve.workload.io import trace_suffix

record_app = typer.Typer(
    name="record",
    help="Record real rollouts (natural lengths, token ids) into a trace; write the math "
    "prompt set.",
    no_args_is_help=True,
)


def _endpoints(text: str) -> list[str]:
    urls = [u.strip() for u in text.split(",") if u.strip()]
    if not urls:
        raise ConfigError(f"--endpoints {text!r}: no URL")
    bad = [u for u in urls if not u.startswith(("http://", "https://"))]
    if bad:
        raise ConfigError(f"--endpoints: {bad[0]!r} is not an http(s):// URL")
    return urls


def _trace_out(out: Path) -> None:
    if not trace_suffix(out):
        raise ConfigError(f"--out {out}: use a trace suffix (.jsonl, .jsonl.gz, .csv, .csv.gz, "
                          ".parquet)")
    checks.output_file(out, "--out")


@record_app.command("run")
def run(
    endpoints: Annotated[str, typer.Option("--endpoints", help="Comma-separated server URLs.")],
    out: Annotated[
        Path, typer.Option("--out", help="Trace file: .jsonl, .jsonl.gz, .csv, .csv.gz, .parquet.")
    ],
    prompts: Annotated[
        str,
        typer.Option("--prompts", help="JSONL prompt file, or math (the shipped word problems)."),
    ] = "math",
    num_prompts: Annotated[
        int | None, typer.Option("--num-prompts", help="Use the first K prompts.")
    ] = None,
    group_size: Annotated[int, typer.Option("--group-size", help="n: samples per prompt.")] = 8,
    epochs: Annotated[int, typer.Option("--epochs", help="Times every prompt runs.")] = 1,
    first_epoch: Annotated[
        int, typer.Option("--first-epoch", help="Index of the first epoch (a recording in "
                          "parts: same --seed, then `record join`).")
    ] = 0,
    groups_per_step: Annotated[
        int | None,
        typer.Option("--groups-per-step", help="Prompts per rollout step (default: an epoch)."),
    ] = None,
    backend: Annotated[Backend, typer.Option("--backend")] = Backend.VLLM_CHAT,
    model: Annotated[
        str | None, typer.Option("--model", help="Served model name (default: the one served).")
    ] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens")] = 1024,
    temperature: Annotated[float, typer.Option("--temperature")] = 1.0,
    top_p: Annotated[float | None, typer.Option("--top-p")] = None,
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="Run seed: every request gets its own seed derived from it, "
                     "the prompt, epoch and sample (default: drawn at random, recorded in the "
                     "info). vLLM CPU: serve with --no-enable-chunked-prefill, see docs."),
    ] = None,
    unseeded: Annotated[
        bool, typer.Option("--unseeded", help="Send no seeds (the servers' own generators; "
                           "siblings on two servers can come out identical).")
    ] = False,
    stream: Annotated[
        bool, typer.Option("--stream/--no-stream", help="Stream: record chunk arrival times.")
    ] = False,
    stream_interval: Annotated[
        int | None, typer.Option("--stream-interval", help="With --stream: tokens per chunk.")
    ] = None,
    request_timeout: Annotated[float, typer.Option("--request-timeout")] = 3600.0,
) -> None:
    """Run every prompt EPOCHS times as groups of GROUP_SIZE on the servers (natural EOS, the
    given sampling) and write the trace with token ids, plus OUT.info.json (settings, server
    versions, step times)."""
    urls = _endpoints(endpoints)
    _trace_out(out)
    cfg = RecordConfig(
        group_size=group_size,
        num_epochs=epochs,
        first_epoch=first_epoch,
        groups_per_step=groups_per_step,
        backend=backend,
        model=model,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        seeded=not unseeded,
        stream=stream,
        stream_interval=stream_interval,
        request_timeout_s=request_timeout,
    )
    pset = read_prompt_set(prompts).head(num_prompts)

    def progress(s: StepRecord) -> None:
        typer.echo(
            f"epoch {s.epoch} step {s.step}: {s.num_groups} groups, {s.generated_tokens} tokens "
            f"in {s.wall_s:.1f} s", err=True,
        )  # fmt: skip

    rec = record(urls, pset, cfg, out=out, on_step=progress)
    typer.echo(json.dumps({"out": str(out), "epochs": epochs, **summary(rec)}))


@record_app.command("join")
def join(
    parts: Annotated[list[Path], typer.Argument(help="Trace files of the parts (each with its "
                                                "info file beside it).")],
    out: Annotated[Path, typer.Option("--out", help="Trace file of the whole recording.")],
) -> None:
    """Join a recording made in parts (``run --first-epoch E --seed S`` per part) into one
    trace and info file; refuses parts that are not one recording."""
    _trace_out(out)
    rec = join_parts([read_recording(p) for p in parts])
    rec.write(out)
    typer.echo(json.dumps({"out": str(out), "epochs": rec.info["config"]["num_epochs"],
                           **summary(rec)}))


def summary(rec: Recording) -> dict[str, Any]:
    """The one-line summary of a recording (lengths, truncation, accuracy, sibling copies)."""
    lens = rec.trace.response_tokens
    fr = rec.trace.finish_reason
    copies = rec.info.get("sibling_copies")
    if copies and copies["num_copies"]:
        typer.echo(f"warning: {copies['num_copies']} responses are exact copies of a sibling "
                   f"(in {copies['num_groups_with_copies']} groups); see the info file", err=True)
    return {
        "rows": rec.trace.num_rows,
        "prompts": rec.trace.num_prompts,
        "p50": float(np.percentile(lens, 50)),
        "p90": float(np.percentile(lens, 90)),
        "mean": float(lens.mean()),
        "max": int(lens.max()),
        "truncated": float(np.mean(fr == "length")) if fr is not None else None,
        "correct": float(rec.trace.correct.mean()) if rec.trace.correct is not None else None,
        "sibling_copies": copies["num_copies"] if copies else None,
        "run_seed": rec.info.get("run_seed"),
        "wall_s": round(rec.info["wall_s"], 1),
    }


@record_app.command("prompts")
def prompts_cmd(
    out: Annotated[Path, typer.Option("--out", help="JSONL file to write.")],
    seed: Annotated[int, typer.Option("--seed")] = SHIPPED_SEED,
    per_level: Annotated[
        int, typer.Option("--per-level", help="Problems per difficulty level (5 levels).")
    ] = SHIPPED_PER_LEVEL,
) -> None:
    """Write the seeded math word problems (levels 1-5, interleaved) as a JSONL prompt file;
    the defaults reproduce the shipped set (``--prompts math``)."""
    checks.output_file(out, "--out")
    problems = generate(seed, per_level)
    write_problems(problems, out)
    typer.echo(f"wrote {len(problems)} problems to {out}")
