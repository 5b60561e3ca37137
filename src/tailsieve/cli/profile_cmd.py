"""``tailsieve profile``: measure a live replica's tau(b) and write a profile JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tailsieve.errors import ConfigError
from tailsieve.runtime.profiler import (
    ProfileResult,
    ProfileSettings,
    mean_profile,
    profile_endpoints,
)


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None


def profile(
    endpoint: Annotated[
        list[str],
        typer.Option(
            "--endpoint",
            help="Replica base URL (http://host:port). Repeat it to measure several replicas "
            "in lockstep; the profile written is then their mean.",
        ),
    ],
    batch_sizes: str = typer.Option("1,2,4,8,16,32", "--batch-sizes", help="Comma list."),
    tokens: int = typer.Option(200, "--tokens", help="Tokens per request (ignore_eos)."),
    out: str = typer.Option(None, "--out", help="Write the profile JSON here (else stdout)."),
    model: str = typer.Option(None, "--model", help="Model name (default: the one the server serves)."),
    name: str = typer.Option(None, "--name", help="Profile name (default: measured-MODEL)."),
    prompt: str = typer.Option("hello", "--prompt", help="Prompt text of every request."),
    timeout_s: float = typer.Option(600.0, "--timeout", help="Limit per batch, seconds."),
    repeats: int = typer.Option(1, "--repeats", help="Rounds per batch size (median)."),
) -> None:
    """Sweep batch sizes with concurrent requests and record seconds per decode step.

    The output loads with `--profile FILE` wherever a profile is accepted. With several
    `--endpoint`s every round runs on all of them at once (the load of a rollout step on a
    shared machine); the file holds their mean plus each one under `per_endpoint`."""
    settings = [
        ProfileSettings(endpoint=e.rstrip("/"), batch_sizes=_batch_sizes(batch_sizes),
                        tokens=tokens, model=model, prompt=prompt, timeout_s=timeout_s,
                        repeats=repeats)
        for e in endpoint
    ]
    names = [name if len(settings) == 1 else None for _ in settings]
    results = asyncio.run(profile_endpoints(settings, names))
    tables = [_table(st.endpoint, r) for st, r in zip(settings, results, strict=True)]
    if len(results) == 1:
        data = results[0].to_dict()
    else:
        mean = mean_profile(results, name or results[0].model.name)
        data = mean.to_dict()
        data["per_endpoint"] = [
            {"endpoint": st.endpoint, **r.to_dict()}
            for st, r in zip(settings, results, strict=True)
        ]
    text = json.dumps(data, indent=2) + "\n"
    console = Console(stderr=out is None)
    for t in tables:
        console.print(t)
    if out is None:
        print(text, end="")
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {out}")


def _table(endpoint: str, result: ProfileResult) -> Table:
    table = Table(title=f"profile '{result.model.name}' from {endpoint}")
    for col in ("batch", "ms/step", "first..last done ms", "tok/s per request", "overhead ms",
                "wall s"):
        table.add_column(col, justify="right")
    for m in result.measurements:
        table.add_row(str(m.batch_size), f"{m.step_s * 1e3:.3f}",
                      f"{m.first_done_step_s * 1e3:.2f}..{m.last_done_step_s * 1e3:.2f}",
                      f"{1 / m.step_s:.0f}", f"{m.overhead_s * 1e3:.1f}", f"{m.wall_s:.2f}")
    return table
