"""``tailsieve report DIR``: a self-contained HTML page from a simulate/rollout/demo folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tailsieve.cli import checks
from tailsieve.core.training_step import DEFAULT_ROLLOUT_SHARE
from tailsieve.report.html_report import write_report


def report(
    folder: Annotated[
        Path, typer.Argument(help="Output folder of simulate --out, rollout --out or demo.")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="HTML file (default FOLDER/report.html).")
    ] = None,
    rollout_share: checks.RolloutShare = DEFAULT_ROLLOUT_SHARE,
) -> None:
    """Render a run folder into an HTML page with PNG plots (step times, q/m, timelines,
    response lengths, capture rates); every rollout speedup with the training step's."""
    path = write_report(folder, out, checks.rollout_share(rollout_share))
    print(path)
