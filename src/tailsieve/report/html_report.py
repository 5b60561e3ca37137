"""Self-contained HTML report: summary table plus every plot, PNGs embedded as base64."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from tailsieve.report import plots
from tailsieve.report.run_data import RunData, load_run

SUMMARY_KEYS = (
    "policy",
    "steady_step_s",
    "mean_step_s",
    "speedup_vs_uniform",
    "mean_speedup_vs_uniform",
    "wasted_token_fraction",
    "lower_bound_ratio",
)


def write_report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Render ``folder``'s run into ``out`` (default ``folder/report.html``) with PNGs beside it."""
    run = load_run(folder)
    root = Path(folder)
    target = Path(out) if out is not None else root / "report.html"
    png_dir = target.parent / "report_png"
    png_dir.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, Path]] = []

    def add(title: str, p: Path | None) -> None:
        if p is not None:
            figures.append((title, p))

    add("Step time per policy", plots.step_times(run, png_dir / "step_times.png"))
    add("q and m over steps", plots.q_m_trajectories(run, png_dir / "q_m.png"))
    for pol, tl in run.timelines.items():
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in pol)
        add(
            f"Per-replica timeline: {pol}",
            plots.timeline(
                tl, png_dir / f"timeline_{safe}.png", f"{pol}: step {tl.step}, q={tl.q}, m={tl.m}"
            ),
        )
    add("Response-length distributions", plots.length_distributions(run, png_dir / "lengths.png"))
    add("Capture rate versus rho", plots.capture_rates(run, png_dir / "capture.png"))
    target.write_text(render_html(run, figures))
    return target


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, list):
        return " ".join(str(x) for x in v[-12:])
    return "" if v is None else str(v)


def render_html(run: RunData, figures: list[tuple[str, Path]]) -> str:
    rows = []
    for s in run.summaries:
        cells = "".join(f"<td>{html.escape(_fmt(s.get(k)))}</td>" for k in SUMMARY_KEYS)
        rows.append(f"<tr>{cells}</tr>")
    head = "".join(f"<th>{k}</th>" for k in SUMMARY_KEYS)
    table = f"<table><tr>{head}</tr>{''.join(rows)}</table>" if rows else "<p>No summary.</p>"
    settings = "".join(
        f"<li><b>{html.escape(str(k))}</b>: {html.escape(_fmt(v))}</li>"
        for k, v in run.settings.items()
    )
    figs = []
    for title, p in figures:
        b64 = base64.b64encode(p.read_bytes()).decode()
        figs.append(
            f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{b64}">'
            f"<figcaption>{html.escape(title)}</figcaption></figure>"
        )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>TailSieve report: {html.escape(run.source.name)}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px}}
figure{{margin:1.5em 0}}img{{max-width:100%}}figcaption{{color:#555}}</style></head>
<body><h1 id="title">TailSieve report ({html.escape(run.kind)})</h1>
<p>Source: <code>{html.escape(str(run.source))}</code></p>
<h2>Summary</h2>{table}
<h2>Settings</h2><ul>{settings}</ul>
<h2>Figures</h2>
<div id="figures" data-count="{len(figures)}">{"".join(figs)}</div>
</body></html>
"""
