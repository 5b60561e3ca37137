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
    "paired_speedup",
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
    add("Predicted vs observed pool times",
        plots.predicted_vs_observed(run, png_dir / "predicted_vs_observed.png"))
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


# (column, key in a step's diagnostics, format)
STEP_COLUMNS = (
    ("step", "step", "{}"), ("q", "q", "{}"), ("m", "m", "{}"),
    ("step s", "makespan_s", "{:.1f}"),
    ("T_tail pred", "predicted_tail_s", "{:.1f}"), ("T_tail obs", "tail_time_s", "{:.1f}"),
    ("T_bulk pred", "predicted_bulk_s", "{:.1f}"), ("T_bulk_cut obs", "bulk_cut_s", "{:.1f}"),
    ("cutoff", "cutoff_s", "{:.1f}"), ("tail idle rep-s", "tail_idle_replica_s", "{:.1f}"),
    ("aborted tokens", "aborted_tokens", "{}"), ("aborted rep-s", "aborted_replica_s", "{:.1f}"),
    ("wasted", "wasted_fraction", "{:.1%}"), ("capture", "capture_rate", "{:.0%}"),
)
DIAG_KEYS = (
    "tail_obs_over_pred", "bulk_obs_over_pred", "makespan_obs_over_pred", "tail_idle_fraction",
    "idle_fraction", "aborted_replica_fraction", "capture_rate",
)


def _cell(fmt: str, v: Any) -> str:
    return "" if v is None else html.escape(fmt.format(v))


def diagnostics_html(run: RunData) -> str:
    """The per-policy diagnostics summary, the paired statistic and, per protocol policy, the
    per-step table of where the time went (``docs/diagnostics.md``)."""
    parts = []
    rows = []
    for s in run.summaries:
        d, st = s.get("diagnostics"), s.get("paired_stat")
        if not isinstance(d, dict):
            continue
        paired = "" if not isinstance(st, dict) else (
            f"{st['mean']:.3f}x" + (f" [{st['ci_low']:.3f}, {st['ci_high']:.3f}]"
                                     if st.get("ci_low") is not None else "")
            + f" ({st['num_seeds']} seed(s), steps >= {st['steady_from']})")
        cells = "".join(f"<td>{html.escape(_fmt(d.get(k)))}</td>" for k in DIAG_KEYS)
        rows.append(f"<tr><td>{html.escape(str(s.get('policy')))}</td>"
                    f"<td>{html.escape(paired)}</td>{cells}</tr>")
    if rows:
        head = "".join(f"<th>{k}</th>" for k in ("policy", "paired speedup", *DIAG_KEYS))
        parts.append(f'<table id="diagnostics"><tr>{head}</tr>{"".join(rows)}</table>')
    for pol, recs in run.steps.items():
        diags = [r["diagnostics"] for r in recs if isinstance(r.get("diagnostics"), dict)]
        if not any(d.get("m") for d in diags):
            continue
        head = "".join(f"<th>{c}</th>" for c, _, _ in STEP_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{_cell(f, d.get(k))}</td>" for _, k, f in STEP_COLUMNS)
            + "</tr>" for d in diags)
        parts.append(f"<h3>{html.escape(pol)}: per step</h3>"
                     f'<table class="steps"><tr>{head}</tr>{body}</table>')
    if not parts:
        return ""
    return ("<h2>Where the step time goes</h2><p>Predicted = the controller's prediction for "
            "the (q, m) it chose, made before the step; rep-s = replica-seconds; capture = "
            "share of the step's q longest groups caught by the previous cutoff.</p>"
            + "".join(parts))


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
{diagnostics_html(run)}
<h2>Settings</h2><ul>{settings}</ul>
<h2>Figures</h2>
<div id="figures" data-count="{len(figures)}">{"".join(figs)}</div>
</body></html>
"""
