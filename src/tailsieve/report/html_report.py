"""Self-contained HTML report that reads like a result: the headline in words first (speedup
over Uniform with its 95% interval, step times, tokens wasted, final q and m), then a table with
human column names and units (empty columns left out), the diagnostics of where the step time
went (``docs/diagnostics.md``), then the plots (PNGs embedded as base64;
step-time axes from zero; the same step of every policy side by side). Every rollout speedup
is printed with the training step's speedup at the stated rollout share of the step
(``core.training_step``; docs/training-step.md)."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tailsieve.core.training_step import (
    DEFAULT_ROLLOUT_SHARE,
    check_rollout_share,
    step_speedup,
)
from tailsieve.report import plots
from tailsieve.report.headline import headline_sentences
from tailsieve.report.run_data import RunData, load_run


def _num(fmt: str) -> Callable[[Any], str]:
    return lambda v: fmt.format(v)


def _last(v: Any) -> str:
    return str(v[-1]) if isinstance(v, list) and v else ""


# summary key -> (column title with unit, cell formatter)
COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("policy", "Policy", str),
    ("mean_step_s", "Mean step time (s, after warm-up)", _num("{:.2f}")),
    ("steady_step_s", "Steady step time (s, last 3 steps)", _num("{:.2f}")),
    ("mean_speedup_vs_uniform", "Speedup vs Uniform (mean)", _num("{:.3f}x")),
    ("speedup_vs_uniform", "Speedup vs Uniform (steady)", _num("{:.3f}x")),
    ("paired_speedup", "Paired speedup vs Uniform (per-step ratio, steady steps)",
     _num("{:.3f}x")),
    ("paired_speedup_vs_requests",
     "Paired speedup vs per-request round-robin (uniform-requests, steady steps)",
     _num("{:.3f}x")),
    ("moves_per_step", "Moves per step (responses moved while running)", _num("{:.0f}")),
    ("wasted_token_fraction", "Tokens wasted (% of generated)", lambda v: f"{100 * v:.1f}%"),
    ("lower_bound_ratio", "Step time / lower bound", _num("{:.2f}")),
    ("q_trajectory", "Final q (tail groups)", _last),
    ("m_trajectory", "Final m (tail replicas)", _last),
)


SPEEDUP_KEYS = frozenset({"mean_speedup_vs_uniform", "speedup_vs_uniform", "paired_speedup",
                          "paired_speedup_vs_requests"})
"""Summary columns that hold a rollout speedup: their cells also give the training step's."""


def with_step(v: float, rollout_share: float) -> str:
    """A rollout speedup cell with the training step's speedup: ``1.120x (step 1.083x)``."""
    return f"{v:.3f}x (step {step_speedup(v, rollout_share):.3f}x)"


def _filled(v: Any) -> bool:
    return v is not None and v != [] and v != ""


def write_report(folder: str | Path, out: str | Path | None = None,
                 rollout_share: float = DEFAULT_ROLLOUT_SHARE) -> Path:
    """Render ``folder``'s run into ``out`` (default ``folder/report.html``) with PNGs beside it;
    training-step speedups at ``rollout_share`` of the step."""
    check_rollout_share(rollout_share)
    run = load_run(folder)
    root = Path(folder)
    target = Path(out) if out is not None else root / "report.html"
    png_dir = target.parent / "report_png"
    png_dir.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, Path]] = []

    def add(title: str, p: Path | None) -> None:
        if p is not None:
            figures.append((title, p))

    add(
        "Step time per policy (seconds; the axis starts at zero)",
        plots.step_times(run, png_dir / "step_times.png"),
    )
    if run.timelines:
        steps = sorted({tl.step for tl in run.timelines.values()})
        which = f"step {steps[0]}" if len(steps) == 1 else "steps " + ", ".join(map(str, steps))
        add(
            f"Per-replica timelines of {which}, side by side on one time axis (bars = groups; "
            "red = tail pool, blue = bulk; hatched = aborted at the cutoff, black edge = carried)",
            plots.timelines_side_by_side(run.timelines, png_dir / "timelines.png"),
        )
    add("q (tail groups) and m (tail replicas) over steps",
        plots.q_m_trajectories(run, png_dir / "q_m.png"))
    add("Predicted vs observed pool times (the controller's prediction for the (q, m) it chose)",
        plots.predicted_vs_observed(run, png_dir / "predicted_vs_observed.png"))
    add("Delivered response lengths (CDF)",
        plots.length_distributions(run, png_dir / "lengths.png"))
    add("Capture rate versus rho", plots.capture_rates(run, png_dir / "capture.png"))
    target.write_text(render_html(run, figures, rollout_share))
    return target


def summary_table(run: RunData, rollout_share: float = DEFAULT_ROLLOUT_SHARE) -> str:
    """The per-policy table: human column names with units; columns empty for every policy
    are left out; a speedup cell also gives the training step's at ``rollout_share``."""
    cols = [c for c in COLUMNS if any(_filled(s.get(c[0])) for s in run.summaries)]
    if not run.summaries or not cols:
        return "<p>No per-policy summary in this run.</p>"
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title, _ in cols)
    rows = []
    for s in run.summaries:
        cells = "".join(
            f"<td>{html.escape(_summary_cell(s.get(key), key, fmt, rollout_share))}</td>"
            for key, _, fmt in cols
        )
        rows.append(f"<tr>{cells}</tr>")
    note = ""
    if any(key in SPEEDUP_KEYS for key, _, _ in cols):
        note = (f'<p id="step-share">Speedups are of the rollout; (step ...) is the training '
                f"step's at a rollout share of {rollout_share:.2f} of the step "
                "(1 / ((1 - share) + share / speedup); --rollout-share).</p>")
    return f'<table id="summary"><tr>{head}</tr>{"".join(rows)}</table>{note}'


def _summary_cell(v: Any, key: str, fmt: Callable[[Any], str], rollout_share: float) -> str:
    if not _filled(v):
        return ""
    if key in SPEEDUP_KEYS and isinstance(v, int | float) and v > 0:
        return with_step(float(v), rollout_share)
    return fmt(v)


def _setting(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return "" if v is None else str(v)


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


def diagnostics_html(run: RunData, rollout_share: float = DEFAULT_ROLLOUT_SHARE) -> str:
    """The per-policy diagnostics summary, the paired statistic (with the training step's
    speedup at ``rollout_share``) and, per protocol policy, the per-step table of where the
    time went (``docs/diagnostics.md``)."""
    parts = []
    rows = []
    for s in run.summaries:
        d, st = s.get("diagnostics"), s.get("paired_stat")
        if not isinstance(d, dict):
            continue
        paired = "" if not isinstance(st, dict) else (
            f"{st['mean']:.3f}x" + (f" [{st['ci_low']:.3f}, {st['ci_high']:.3f}]"
                                     if st.get("ci_low") is not None else "")
            + f" ({st['num_seeds']} seed(s), steps >= {st['steady_from']}); step "
            f"{step_speedup(st['mean'], rollout_share):.3f}x at rollout share "
            f"{rollout_share:.2f}")
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


def render_html(run: RunData, figures: list[tuple[str, Path]],
                rollout_share: float = DEFAULT_ROLLOUT_SHARE) -> str:
    headline = "".join(f"<li>{html.escape(x)}</li>"
                       for x in headline_sentences(run, rollout_share))
    settings = "".join(
        f"<li><b>{html.escape(str(k))}</b>: {html.escape(_setting(v))}</li>"
        for k, v in run.settings.items()
        if v is not None
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
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222;line-height:1.45}}
#headline{{font-size:17px;background:#f4f7fb;border-left:4px solid #1f77b4;padding:.6em 1.2em}}
#headline li{{margin:.25em 0}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px}}
th{{background:#f0f0f0;text-align:left}}td{{text-align:right}}td:first-child{{text-align:left}}
figure{{margin:1.5em 0}}img{{max-width:100%}}figcaption{{color:#555}}</style></head>
<body><h1 id="title">TailSieve report ({html.escape(run.kind)})</h1>
<ul id="headline">{headline}</ul>
<h2>Per policy</h2>{summary_table(run, rollout_share)}
{diagnostics_html(run, rollout_share)}
<h2>Figures</h2>
<div id="figures" data-count="{len(figures)}">{"".join(figs)}</div>
<details><summary>Settings and source</summary>
<p>Source: <code>{html.escape(str(run.source))}</code></p><ul>{settings}</ul></details>
</body></html>
"""
