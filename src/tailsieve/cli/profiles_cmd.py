"""``tailsieve profiles``: list the shipped throughput profiles."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from tailsieve.model.profiles import list_profiles, load_profile


def register(app: typer.Typer) -> None:
    app.command("profiles")(profiles)


def profiles(
    show: str = typer.Option(None, "--show", help="Print one profile (name or file) as JSON."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the shipped throughput profiles (cpu, gpu) and where their numbers come from."""
    if show:
        print(json.dumps(load_profile(show).to_dict(), indent=2))
        return
    models = list_profiles()
    if as_json:
        print(json.dumps([m.to_dict() for m in models], indent=2))
        return
    console = Console()
    for m in models:
        table = Table(title=f"profile '{m.name}'", caption=m.source, caption_justify="left")
        table.add_column("batch", justify="right")
        table.add_column("ms/step", justify="right")
        table.add_column("tok/s per request", justify="right")
        table.add_column("tok/s replica", justify="right")
        for p in m.points:
            table.add_row(
                str(p.batch_size),
                f"{p.step_s * 1e3:.2f}",
                f"{1 / p.step_s:.0f}",
                f"{p.batch_size / p.step_s:.0f}",
            )
        console.print(table)
