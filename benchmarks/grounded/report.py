"""The markdown section of the grounded suite (``grounded.md``), read from its JSON only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .common import CI_METHOD, STEADY_FROM, fmt_pct, fmt_x, header, table_lines

CMD = ".venv/bin/python benchmarks/grounded_suite.py"
BEGIN, END = "<!-- grounded-suite:begin -->", "<!-- grounded-suite:end -->"


def _load(out_dir: Path, name: str) -> dict[str, Any] | None:
    p = out_dir / f"{name}.json"
    return json.loads(p.read_text()) if p.is_file() else None


def _row(rows: list[dict[str, Any]], policy: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["policy"] == policy), None)


def _rel(out_dir: Path, png: str, root: Path) -> str:
    try:
        return str((out_dir / png).resolve().relative_to(root))
    except ValueError:
        return str(out_dir / png)


def headline(out_dir: Path, root: Path) -> list[str]:
    r = _load(out_dir, "headline")
    if r is None:
        return []
    lines = ["### Must-show: every policy on the grounded profiles", "",
             f"![headline]({_rel(out_dir, r['png'], root)})", "", *header(r)]
    for c in r["configs"]:
        rows = c["rows"]
        lines += [f"**{c['label']}** (`{c['profile']}`, {c['workload']}, R = {c['replicas']}, "
                  f"N = {c['groups']} x 8)", "", *table_lines(rows), ""]
        ts, uo = _row(rows, "tailsieve"), _row(rows, "uniform-oracle")
        if ts and uo:
            m, lo = ts["paired"]["mean"], ts["paired"]["ci_low"]
            pool = ("no tail pool in the steady steps (m = 0)" if ts["tail_idle_fraction"] is None
                    else f"capture of the q longest groups {fmt_pct(ts['capture_rate'])}, "
                    f"tail-pool idle {fmt_pct(ts['tail_idle_fraction'])} of its replica-seconds")
            diag = (f"tailsieve diagnostics over the steady steps: {pool}, aborted "
                    f"attempts {fmt_pct(ts['aborted_replica_fraction'])} of all replica-seconds, "
                    f"observed / predicted step time {fmt_x(ts['makespan_obs_over_pred'])}.")
            verdict = (f"tailsieve {m:.3f}x vs Uniform Oracle {uo['paired']['mean']:.3f}x: "
                       f"{'above' if m > uo['paired']['mean'] else 'below'} it; "
                       f"{'>=' if m >= 1.20 else '<'} 1.20x; "
                       f"{'never below' if (lo if lo is not None else m) >= 0.98 else 'can fall below'}"
                       " 0.98x (95% lower bound).")
            lines += [verdict + " " + diag, ""]
    return lines


def table4(out_dir: Path, root: Path) -> list[str]:
    r = _load(out_dir, "table4")
    if r is None:
        return []
    lines = ["### Paper Table 4: routing-only speedup versus N", "",
             f"![table4]({_rel(out_dir, r['png'], root)})", "", *header(r),
             "| profile | N | uniform-oracle | tailsieve-fixed | tailsieve | tailsieve last 3 "
             "| tokens wasted (tailsieve) | paper TailSieve |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in r["cells"]:
        rows = c["rows"]
        cell = {p: (_row(rows, p) or {}).get("paired_label", "–")
                for p in ("uniform-oracle", "tailsieve-fixed", "tailsieve")}
        ts = _row(rows, "tailsieve") or {}
        lines.append(
            f"| {c['profile_used']} | {c['groups']} | {cell['uniform-oracle']} | "
            f"{cell['tailsieve-fixed']} | {cell['tailsieve']} | {fmt_x(ts.get('last3'))} | "
            f"{fmt_pct(ts.get('wasted_token_fraction'))} | {fmt_x(c.get('paper_tailsieve'))} |")
    return [*lines, ""]


def fig6b(out_dir: Path, root: Path) -> list[str]:
    r = _load(out_dir, "fig6b")
    if r is None:
        return []
    lines = ["### Paper Figure 6b: convergence from different initial allocations", "",
             f"![fig6b]({_rel(out_dir, r['png'], root)})", "", *header(r),
             "| profile | policy | start | q over steps | m over steps | final (q, m) "
             "| settled at step | paired speedup (1 seed) |",
             "|---|---|---|---|---|---|---:|---:|"]
    for p in r["panels"]:
        for t in p["trajectories"]:
            init = ", ".join(f"{k} = {v}" for k, v in t["init"].items())
            lines.append(
                f"| {p['profile_used']} | {t['policy']} | {init} | {' '.join(map(str, t['q']))} "
                f"| {' '.join(map(str, t['m']))} | ({t['final_q']}, {t['final_m']}) | "
                f"{t['settled_at']} | {fmt_x(t['paired_speedup'])} |")
    lines += ["", "Paper (Qwen3.5-35B-A3B, R = 4): every q trajectory converges to q = 4 and "
              "both m trajectories to m = 2. `settled at` = first step from which m keeps its "
              "final value and q stays within max(1, 25%) of its final value.", ""]
    return lines


def table2(out_dir: Path, root: Path) -> list[str]:
    r = _load(out_dir, "table2")
    if r is None:
        return []
    cols = r["settings"]["columns"]
    acc = "; ".join(
        f"{c['column']}: `{c['spec']}`" + (
            f", acceptance {c['acceptance_per_token']:.2f} per drafted token, "
            f"{c['tokens_per_step']:.2f} tokens per step, draft cost {c['draft_cost']:.2f} "
            "of a target step per drafted token" if c["acceptance_per_token"] else "")
        for c in cols)
    lines = ["### Paper Table 2: routing alone, + MTP and + DFlash on the tail pool", "",
             f"![table2]({_rel(out_dir, r['png'], root)})", "", *header(r),
             f"Speculation on the tail pool only (bulk plain). {acc}. Speedups are paired "
             "against plain Uniform; `uniform + spec` runs the same speculation on every "
             "replica under Uniform routing.", "",
             "| profile | column | tailsieve-fixed | tailsieve | uniform + spec | paper (fixed) |",
             "|---|---|---:|---:|---:|---:|"]
    for c in r["cells"]:
        rows = c["rows"]
        paper = r["paper"].get(c["profile"], {}).get(c["column"]) \
            if isinstance(r["paper"].get(c["profile"]), dict) else None
        cell = {p: (_row(rows, p) or {}).get("paired_label", "–")
                for p in ("tailsieve-fixed", "tailsieve", "uniform + spec")}
        lines.append(f"| {c['profile_used']} | {c['column']} | {cell['tailsieve-fixed']} | "
                     f"{cell['tailsieve']} | {cell['uniform + spec']} | {fmt_x(paper)} |")
    return [*lines, ""]


def decision(out_dir: Path) -> list[str]:
    r = _load(out_dir, "sim_decision")
    if r is None:
        return []
    return [
        "### Controller decision time (`benchmarks/bench_sim.py`)", "",
        f"{r['benchmark']}: N = {r['num_groups']} x {r['group_size']}, R = "
        f"{r['num_replicas']}, {r['num_steps']} steps in {r['run_s']:.1f} s. Decision "
        f"(protocol + controller) per step: mean {r['decision_ms_mean']:.2f} ms, p99 "
        f"{r['decision_ms_p99']:.2f} ms, max {r['decision_ms_max']:.2f} ms "
        f"({r['num_steps_over_10ms']} steps over 10 ms); controller alone: mean "
        f"{r['controller_ms_mean']:.2f} ms, max {r['controller_ms_max']:.2f} ms; controller "
        f"CPU time: mean {r.get('controller_cpu_ms_mean', float('nan')):.2f} ms, p99 "
        f"{r.get('controller_cpu_ms_p99', float('nan')):.2f} ms, max "
        f"{r.get('controller_cpu_ms_max', float('nan')):.2f} ms. Measured on a shared 2-core "
        f"machine (1-min load average {r.get('load_average_1min', '?')}): wall times include "
        "waiting for a core. Regenerate: `.venv/bin/python benchmarks/bench_sim.py --profile "
        "qwen3-4b-h100`.", ""]


def section(out_dir: Path, root: Path) -> list[str]:
    """The whole section, headed by how to regenerate it and the statistic's definition."""
    body = (headline(out_dir, root) + table4(out_dir, root) + fig6b(out_dir, root)
            + table2(out_dir, root) + decision(out_dir))
    if not body:
        return []
    return [
        "## Grounded profiles: every policy, paired statistic", "",
        f"Regenerate everything in this section: `{CMD}` (`--quick`: 2 seeds, 12 steps; "
        f"`--only headline,table4`: a subset). Results: `{_rel(out_dir, '', root)}`.", "",
        "Statistic (`tailsieve.sim.speedup_stats`, `docs/diagnostics.md`): per seed, the mean "
        "over the steady steps of `T_uniform(t) / T_policy(t)` on the same prompts and lengths "
        f"(steady = steps t >= {STEADY_FROM}: step 0 is the warm-up and the controller gets "
        f"{STEADY_FROM - 1} more steps to settle, the same for every policy; the flush step is "
        f"excluded); over seeds, the mean with a {CI_METHOD}. `last 3 steps` is the paper's "
        "column (ratio of the mean step times of the last three regular steps, mean over "
        "seeds). Capture = share of each step's q longest groups (realized max length) that "
        "the previous cutoff had caught.", "",
        *body,
    ]


def relink_images(text: str, root: Path, md_dir: Path) -> str:
    """Image links written relative to the repository ``root``, made relative to ``md_dir`` (the
    directory of the markdown file that shows them)."""
    try:
        prefix = Path(os.path.relpath(root.resolve(), md_dir.resolve())).as_posix()
    except ValueError:
        return text
    if prefix == ".":
        return text
    return text.replace("](benchmarks/", f"]({prefix}/benchmarks/")


def write(out_dir: Path, root: Path, markdown: Path | None) -> Path:
    """Write ``out_dir/grounded.md``; with ``markdown``, also put the section between the
    markers in that file (appended when the markers are absent)."""
    text = "\n".join(section(out_dir, root)).rstrip() + "\n"
    md = out_dir / "grounded.md"
    md.write_text(text)
    if markdown is not None:
        old = markdown.read_text() if markdown.is_file() else ""
        block = f"{BEGIN}\n{relink_images(text, root, markdown.parent)}{END}\n"
        if BEGIN in old and END in old:
            head, _, rest = old.partition(BEGIN)
            _, _, tail = rest.partition(END)
            new = head + block + tail.lstrip("\n")
        else:
            new = old.rstrip("\n") + "\n\n" + block
        markdown.write_text(new)
    return md
