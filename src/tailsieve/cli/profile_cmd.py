"""``tailsieve profile``: measure a live replica's tau(b) and write a profile JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from tailsieve.errors import ConfigError
from tailsieve.runtime.profiler import ProfileSettings, profile_endpoint


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None


def profile(
    endpoint: str = typer.Option(..., "--endpoint", help="Replica base URL (http://host:port)."),
    batch_sizes: str = typer.Option("1,2,4,8,16,32", "--batch-sizes", help="Comma list."),
    tokens: int = typer.Option(200, "--tokens", help="Tokens per request (ignore_eos)."),
    out: str = typer.Option(None, "--out", help="Write the profile JSON here (else stdout)."),
    model: str = typer.Option(None, "--model", help="Model name (default: from /v1/models)."),
    name: str = typer.Option(None, "--name", help="Profile name (default: measured-MODEL)."),
    prompt: str = typer.Option("hello", "--prompt", help="Prompt text of every request."),
    timeout_s: float = typer.Option(600.0, "--timeout", help="Limit per batch, seconds."),
    repeats: int = typer.Option(1, "--repeats", help="Rounds per batch size (median)."),
) -> None:
    """Sweep batch sizes with concurrent streaming requests and record seconds per decode step.

    The output loads with `--profile FILE` wherever a profile is accepted."""
    settings = ProfileSettings(endpoint=endpoint.rstrip("/"), batch_sizes=_batch_sizes(batch_sizes),
                               tokens=tokens, model=model, prompt=prompt, timeout_s=timeout_s,
                               repeats=repeats)
    result = asyncio.run(profile_endpoint(settings, name=name))
    table = Table(title=f"profile '{result.model.name}' from {settings.endpoint}")
    for col in ("batch", "ms/step", "first..last done ms", "tok/s per request", "overhead ms", "wall s"):
        table.add_column(col, justify="right")
    for m in result.measurements:
        table.add_row(str(m.batch_size), f"{m.step_s * 1e3:.3f}",
                      f"{m.first_done_step_s * 1e3:.2f}..{m.last_done_step_s * 1e3:.2f}",
                      f"{1 / m.step_s:.0f}", f"{m.overhead_s * 1e3:.1f}", f"{m.wall_s:.2f}")
    text = json.dumps(result.to_dict(), indent=2) + "\n"
    if out is None:
        Console(stderr=True).print(table)
        print(text, end="")
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    Console().print(table)
    print(f"wrote {out}")
