"""Write the full benchmark report (``benchmarks/results/REPORT.md``): this project's figures beside the paper's, from the suite's JSON.

Every number in the file is read from ``benchmarks/results/paper/*.json`` (and
``benchmarks/results/real_engine/real_engine.json`` / ``real_engine.md`` when present, and the sections of
``report_extra``); the notes that
say whether a figure is matched are computed from those numbers, and the reasons given are the
ones the measurements show (see each section).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grounded.report import relink_images

from tailsieve.model.profiles import DEFAULT_PROFILE
from tailsieve.model.validation import markdown_table

from . import report_extra
from .common import REPO

CMD = ".venv/bin/python benchmarks/run_all.py --out benchmarks/results --markdown benchmarks/results/REPORT.md"


def _gpu_key(names: Any) -> str:
    """The GPU profile's key in a results file: the default derived profile, or the retired
    hand-drawn ``gpu`` curve in older results files."""
    return DEFAULT_PROFILE if DEFAULT_PROFILE in names else "gpu"


def _load(out_dir: Path, name: str) -> dict[str, Any] | None:
    p = out_dir / f"{name}.json"
    return json.loads(p.read_text()) if p.is_file() else None


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def _x(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}x"


def _rel(out_dir: Path, png: str) -> str:
    try:
        return str((out_dir / png).resolve().relative_to(REPO))
    except ValueError:
        return str(out_dir / png)


def _header(r: dict[str, Any], out_dir: Path, name: str) -> list[str]:
    m = r.get("machine", {})
    return [
        f"![{name}]({_rel(out_dir, r['png'])})",
        "",
        f"Regenerate: `{CMD} --only {name}` ({'quick' if r.get('quick') else 'full'} "
        f"configuration, {r.get('runtime_s', 0):.0f} s). Measured {m.get('date_utc', '?')} on "
        f"{m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}.",
        "",
    ]


def fig2(out_dir: Path) -> tuple[list[str], list[str]]:
    r = _load(out_dir, "fig2_oracle")
    if r is None:
        return [], []
    lines = ["## Figure 2 and appendix A.4: exact oracle versus top-k isolation", ""]
    lines += _header(r, out_dir, "fig2_oracle")
    lines += ["| profile | draws x requests | best-k gap median | P90 | max | share within 4% "
              "| example draw: uniform / optimum / best top-k (k) | paper |",
              "|---|---|---:|---:|---:|---:|---|---|"]
    summary = []
    for prof, p in r["profiles"].items():
        ex = p["example"]
        lines.append(
            f"| {prof} | {p['num_draws']} x {p['num_requests']} | {_pct(p['gap_median'], 2)} | "
            f"{_pct(p['gap_p90'], 2)} | {_pct(p['gap_max'], 2)} | {_pct(p['share_within_4pct'], 0)} "
            f"| {ex['uniform_makespan_s']:.1f} s / {ex['optimal_makespan_s']:.1f} s / "
            f"{ex['topk_makespan_s']:.1f} s ({ex['best_k']}) | within 4% |")
        ok = p["gap_max"] <= 0.04
        summary.append(f"| Fig. 2 / A.4 best-k gap ({prof}) | within 4% | max "
                       f"{_pct(p['gap_max'], 2)}, median {_pct(p['gap_median'], 2)} | "
                       f"{'matched' if ok else 'not matched'} |")
    gpu = r["profiles"].get(_gpu_key(r["profiles"]), {}).get("example", {})
    lines += ["",
              "Matched: on the AIME lengths the best top-k split is within "
              f"{_pct(max(p['gap_max'] for p in r['profiles'].values()), 2)} of the exact optimum "
              "in every draw (the paper: within 4%). The paper's representative group isolates 4 "
              f"of 100 requests; on this data the optimum isolates "
              f"{gpu.get('optimal_tail_requests', '?')} ({_gpu_key(r['profiles'])} profile, seed-0 draw), because the "
              "AIME lengths (P50 ~7.6k of a 16k cap) are far less skewed than the paper's trace, "
              "so more requests must move to balance the two replicas. The absolute seconds "
              "differ from the paper's 54.84 s (other lengths and throughput model).", ""]
    return lines, summary


def fig3(out_dir: Path) -> tuple[list[str], list[str]]:
    r = _load(out_dir, "fig3_capture")
    if r is None:
        return [], []
    lines = ["## Figure 3: partial-rollout capture rate versus rho", ""]
    lines += _header(r, out_dir, "fig3_capture")
    lines += ["| workload | profile | ground truth | rho | same round | next step | top-1 same / "
              "next | random | paper |", "|---|---|---|---:|---:|---:|---|---:|---:|"]
    summary = []
    paper = r["paper"]
    for c in r["cases"]:
        for res in c["results"]:
            pk = str(res["rho"]).rstrip("0") if res["rho"] != 0.1 else "0.1"
            pap = paper.get(pk, paper.get(str(res["rho"])))
            lines.append(
                f"| {c['workload']} | {c['profile']} | {c['ground_truth']} | {_pct(res['rho'], 0)}"
                f" | {_pct(res['same_round_capture'])} | {_pct(res['cross_step_capture'])} | "
                f"{_pct(res['same_round_top1'], 0)} / {_pct(res['cross_step_top1'], 0)} | "
                f"{_pct(res['random_baseline'])} | {_pct(pap, 0) if pap else ''} |")
        if c["ground_truth"] == "k = G - N" and c["profile"] in (DEFAULT_PROFILE, "gpu"):
            vals = " / ".join(_pct(x["same_round_capture"], 0) for x in c["results"])
            nxt = " / ".join(_pct(x["cross_step_capture"], 0) for x in c["results"])
            summary.append(f"| Fig. 3 capture at rho 5/10/25% ({c['workload']}, {c['profile']}) | "
                           f"85 / 93 / 95% | same round {vals}; next step {nxt} | "
                           "see notes |")
    aime = next((c for c in r["cases"] if c["workload"] == "aime"
                 and c["profile"] in (DEFAULT_PROFILE, "gpu")
                 and c["ground_truth"] == "k = G - N"), None)
    gap = ""
    if aime:
        d = [paper[k] - x["same_round_capture"] for k, x in zip(paper, aime["results"],
                                                                 strict=False)]
        gap = f"{100 * min(d):.0f}-{100 * max(d):.0f}"
    lines += ["",
              "Partly matched. The paper does not say which ground truth its capture rate uses; "
              "two are shown. With `k = G - N` (as many long-tail groups as candidates: capture "
              "is precision and recall at once) the *same-round* capture on the synthetic "
              "`paper-math` preset is at or above the paper's numbers, but on the real AIME "
              f"lengths it is {gap} points lower: AIME's lengths are compressed under a 16k cap "
              "(P90/P50 ~1.7 versus 3.5 in the paper's math data), so many groups are near-tied "
              "and the cutoff order is noisier. With a fixed top-5% tail (recall) capture rises "
              "with rho as in the paper. The *next-step* capture (the same prompts regenerated, "
              "which is what TailSieve actually relies on) is much lower on both workloads: "
              "prompt identity explains only part of the length variance, and on AIME (one "
              "checkpoint) the next step is the other half of each prompt's 8 samples. The top-1 "
              "column shows that the single longest group is almost always caught.", ""]
    return lines, summary


def fig4(out_dir: Path) -> tuple[list[str], list[str]]:
    r = _load(out_dir, "fig4_landscape")
    if r is None:
        return [], []
    st = r["settings"]
    lines = ["## Figure 4: the T(q, m) landscape under weak, real and strong tails", ""]
    lines += _header(r, out_dir, "fig4_landscape")
    lines += [f"`{st['workload']}` with the A.5 tail-strength transform, {st['profile']} "
              f"profile, R = {st['replicas']}, N = {st['groups']}, n = {st['group_size']}. "
              "Solid lines: the controller's `PoolTimePredictor` on the delivered work of the "
              f"last {st['history_steps']} steps of a TailSieve run ({st['steps']} steps); circles "
              "mark q*(m). Dashed: simulated ground truth, the step protocol with a fixed "
              f"(q, m, c = q), mean over steps 1..{st['ground_truth_steps'] - 1}; squares mark "
              "q*(m). Red star: where the `tailsieve` controller ends.", "",
              "| tail | m (bulk:tail) | predicted q*(m), T | simulated q*(m), T | uniform 4:0 "
              "pred / sim | controller final (q, m) | TailSieve speedup steady / mean |",
              "|---|---|---|---|---|---|---|"]
    summary = []
    for label, sc in r["scenes"].items():
        for m, p in sc["predicted"].items():
            s = sc["simulated"][m]
            lines.append(
                f"| {label} | {st['replicas'] - int(m)}:{m} | {p['q_star']}, {p['t_star_s']:.1f} s"
                f" | {s['q_star']}, {s['t_star_s']:.1f} s | {sc['predicted_uniform_s']:.1f} / "
                f"{sc['simulated_uniform_s']:.1f} s | ({sc['controller_final']['q']}, "
                f"{sc['controller_final']['m']}) | {_x(sc['tailsieve_steady_speedup'])} / "
                f"{_x(sc['tailsieve_mean_speedup'])} |")
        summary.append(
            f"| Fig. 4 best (q, m), {label} tail | workload-dependent | predicted "
            f"({sc['predicted_best']['q']}, {sc['predicted_best']['m']}), simulated "
            f"({sc['simulated_best']['q']}, {sc['simulated_best']['m']}), controller "
            f"({sc['controller_final']['q']}, {sc['controller_final']['m']}) | see notes |")
    ratios, q_pairs, beats = [], [], []
    n_smaller = 0
    r_grid = next(iter(r["scenes"].values()))["simulated"]["1"]["q"]
    for label, sc in r["scenes"].items():
        for m, p in sc["predicted"].items():
            ratios.append(sc["simulated"][m]["t_star_s"] / p["t_star_s"])
            n_smaller += p["q_star"] < sc["simulated"][m]["q_star"]
            q_pairs.append(f"{p['q_star']} vs {sc['simulated'][m]['q_star']}")
        best_sim = min(v["t_star_s"] for v in sc["simulated"].values())
        beats.append(f"{label} {sc['simulated_uniform_s'] / best_sim:.3f}x")
    lines += ["",
              "The qualitative claim holds: q*(m) and the best split move with the tail strength "
              "(the paper gives no numbers for Figure 4, so only the shape is compared). Three "
              "quantitative observations:", "",
              "* The predictor is optimistic: at each slice's optimum the simulated step time is "
              f"{min(ratios):.2f}-{max(ratios):.2f}x the predicted one. The model puts the "
              "history's tail groups first and stands in for the fresh surplus with evenly spaced "
              "population samples, while the protocol pays for the real cutoff (aborted groups "
              "hold bulk slots until the cutoff) and for selector misses. The controller "
              "corrects the level with observed/predicted ratios, not the shape.",
              f"* The predicted q*(m) is smaller than the simulated one in {n_smaller} of "
              f"{len(q_pairs)} slices (predicted vs simulated on the grid {r_grid}, slices "
              f"m = 1..{st['replicas'] - 1} per tail: {'; '.join(q_pairs)}). In "
              "the protocol the regenerated candidates are a noisy next-step tail set (Figure 3), "
              "so isolating more of them pays; the model assumes the tail it isolates is the "
              "historical one.",
              "* The best fixed (q, m) of the simulated ground truth beats uniform routing by "
              f"{', '.join(beats)} (mean step time), while the `tailsieve` controller, steered by "
              "the predictor, does not (speedup column). So on these workloads the "
              "controller's model, not the routing structure alone, is where the gap to the "
              "paper starts.", ""]
    return lines, summary


def fig6b(out_dir: Path) -> tuple[list[str], list[str]]:
    r = _load(out_dir, "fig6b_convergence")
    if r is None:
        return [], []
    lines = ["## Figure 6b: controller convergence from different initial allocations", ""]
    lines += _header(r, out_dir, "fig6b_convergence")
    lines += ["| loop | policy | start | trajectory (per step) | final (q, m) | speedup vs "
              "uniform steady / mean | paper |", "|---|---|---|---|---|---|---|"]
    for t in r["trajectories"]:
        traj = t["q"] if t["loop"] == "inner" else t["m"]
        init = ", ".join(f"{k} = {v}" for k, v in t["init"].items())
        lines.append(
            f"| {t['loop']} | {t['policy']} | {init} | {'q' if t['loop'] == 'inner' else 'm'}: "
            f"{', '.join(map(str, traj))} | ({t['final_q']}, {t['final_m']}) | "
            f"{_x(t['steady_speedup_vs_uniform'])} / {_x(t['mean_speedup_vs_uniform'])} | "
            f"{'q -> 4' if t['loop'] == 'inner' else 'm -> 2'} |")
    inner = [t for t in r["trajectories"] if t["loop"] == "inner"]
    outer = [t for t in r["trajectories"] if t["loop"] == "outer"]
    late = [t["q"][-max(1, len(t["q"]) // 3):] for t in inner]
    q_band = [f"{min(x)}-{max(x)} (mean {sum(x) / len(x):.1f})" for x in late]
    q_same = all(abs(sum(a) / len(a) - sum(late[0]) / len(late[0])) <= 2 for a in late)
    m_same = len({t["final_m"] for t in outer}) == 1
    summary = [
        f"| Fig. 6b inner loop q from q0 = 1 and N/2 (last third of the steps) | both -> 4 | "
        f"{' and '.join(q_band)} | "
        f"{'same band, not q = 4' if q_same else 'different points'} |",
        f"| Fig. 6b outer loop m from m0 = 0 and 3 (R = 4) | both -> 2 | "
        f"{' and '.join(str(t['final_m']) for t in outer)} | "
        f"{'matched' if m_same and outer[0]['final_m'] == 2 else 'not matched'} |",
    ]
    lines += ["",
              "Inner loop: over the last third of the steps q stays in "
              f"{' and '.join(q_band)} from the two starts "
              f"({'the same band' if q_same else 'not the same band'}; it keeps moving by a "
              "step or two because the balanced target q* is recomputed from noisy step times "
              "every step; the paper's q = 4 is for its model and data). Outer loop: "
              f"m ends at {', '.join(str(t['final_m']) for t in outer)} (paper: both at 2). "
              "Where the two ends differ, it is by one replica between splits whose predicted "
              "makespans trade places from step to step (measured at R = 4: m = 2 and m = 3 "
              "within -3% to +5% of each other, the noise of a 4-step history), and a move "
              "needs a gain above the 2% threshold in two decisions in a row, so each run stays "
              "where it first settled. The step-time column shows that converging is not the same as being faster than "
              "uniform in this simulator (see Tables 1 and 4).", ""]
    return lines, summary


def tables(out_dir: Path) -> tuple[list[str], list[str]]:
    r = _load(out_dir, "tables_policies")
    if r is None:
        return [], []
    st = r["settings"]
    lines = ["## Tables 1 and 4: all policies, N = 64 / 128 / 256", ""]
    lines += _header(r, out_dir, "tables_policies")
    lines += [f"R = {st['replicas']}, n = {st['group_size']}, {st['steps']} steps, mean of seeds "
              f"{st['seeds']}. *steady* = mean of the last 3 steps (paper 4.2), *mean* = mean "
              "over steps 1..S-1; speedups over Uniform, paired per seed. LB = makespan / lower "
              "bound of the delivered batch (mean over steps; steady in brackets).", ""]
    t1 = r["paper"]["table1_range_n64"]
    t4 = r["paper"]["table4_tailsieve_range"]
    summary = []
    for wl in st["workloads"]:
        for prof in st["profiles"]:
            lines += [f"**{wl}, {prof} profile**", "",
                      "| policy | " + " | ".join(f"N = {n}: steady / mean speedup, LB" for n in
                                                  st["sizes"]) + " | final (q, m) at N = 64 "
                      "| paper Table 1 (N = 64, DeepScaleR, 5 models) |",
                      "|---|" + "---|" * len(st["sizes"]) + "---|---|"]
            rows = [x for x in r["rows"] if x["workload"] == wl and x["profile"] == prof]
            for pol in dict.fromkeys(x["policy"] for x in rows):
                cells = []
                for n in st["sizes"]:
                    x = next(y for y in rows if y["policy"] == pol and y["num_groups"] == n)
                    cells.append(f"{_x(x['steady_speedup'])} / {_x(x['mean_speedup'])}, "
                                 f"{x['lb_ratio_mean']:.2f} [{x['lb_ratio_steady']:.2f}]")
                x64 = next((y for y in rows if y["policy"] == pol and y["num_groups"] == 64),
                           None)
                qm = ", ".join(f"({q}, {m})" for q, m in x64["final_qm"]) if x64 and (
                    pol.startswith("tailsieve") or pol == "topk-oracle") else "–"
                rng = t1.get(pol)
                paper = f"{rng[0]:.3f}-{rng[1]:.3f}x" if rng else "–"
                lines.append(f"| {pol} | " + " | ".join(cells) + f" | {qm} | {paper} |")
            lines.append("")
            ts = {n: next(y for y in rows if y["policy"] == "tailsieve" and y["num_groups"] == n)
                  for n in st["sizes"]}
            best_oracle = {n: max((y for y in rows if y["num_groups"] == n and "oracle" in
                                   y["policy"]), key=lambda y: y["steady_speedup"])
                           for n in st["sizes"]}
            summary.append(
                f"| Tables 1/4 TailSieve speedup, {wl} {prof} (N = "
                f"{'/'.join(map(str, st['sizes']))}) | "
                + "/".join(f"{t4[str(n)][0]:.2f}-{t4[str(n)][1]:.2f}x" for n in st["sizes"]
                           if str(n) in t4)
                + " | steady " + "/".join(f"{ts[n]['steady_speedup']:.3f}" for n in st["sizes"])
                + ", mean " + "/".join(f"{ts[n]['mean_speedup']:.3f}" for n in st["sizes"])
                + f" (best oracle at N = {st['sizes'][0]}: "
                f"{best_oracle[st['sizes'][0]]['policy']} "
                f"{best_oracle[st['sizes'][0]]['steady_speedup']:.3f}x) | "
                + ("matched" if all(t4[str(n)][0] <= ts[n]["steady_speedup"] for n in st["sizes"]
                                    if str(n) in t4) else "not matched") + " |")
    in_range = []
    for pol in ("uniform-oracle", "streamrl-oracle", "seer-oracle"):
        xs = [y for y in r["rows"] if y["policy"] == pol and y["num_groups"] == 64]
        lo, hi = t1[pol]
        k = sum(lo <= y["steady_speedup"] <= hi for y in xs)
        vals = ", ".join(f"{y['steady_speedup']:.3f}" for y in xs)
        in_range.append(f"{pol} {k} of {len(xs)} ({vals})")
    oracle_note = ("At N = 64 the oracle baselines (true lengths) fall inside the paper's Table 1 "
                   "range in: " + "; ".join(in_range) + " (order: workload x profile as above).")
    ts_rows = [y for y in r["rows"] if y["policy"] in ("tailsieve", "tailsieve-fixed")]
    ts_only = [y["steady_speedup"] for y in ts_rows if y["policy"] == "tailsieve"]
    fx_only = [y["steady_speedup"] for y in ts_rows if y["policy"] == "tailsieve-fixed"]
    ts_lo, ts_hi = min(ts_only), max(ts_only)
    fx_lo, fx_hi = min(fx_only), max(fx_only)
    wasted_lo = min(y["wasted_token_fraction"] for y in ts_rows)
    wasted_hi = max(y["wasted_token_fraction"] for y in ts_rows)
    tk = [y["steady_speedup"] for y in r["rows"] if y["policy"] == "topk-oracle"]
    tk_lo, tk_hi = min(tk), max(tk)
    lines += [
        "Paper Table 4 (TailSieve over Uniform, DeepScaleR, 5 models): "
        + ", ".join(f"N = {k}: {v[0]:.3f}-{v[1]:.3f}x" for k, v in t4.items()) + ".", "",
        f"**TailSieve: {'matched' if all('| matched |' in x for x in summary) else 'not matched'}.** "
        + oracle_note + f" TailSieve stays at {ts_lo:.2f}-{ts_hi:.2f}x and the fixed-allocation "
        f"variant at {fx_lo:.2f}-{fx_hi:.2f}x (steady, over all workloads, profiles and N) "
        "instead of the paper's 1.02-1.35x. The simulator and controller were not changed to chase the target. "
        "What the runs show (see also the simulator page of the docs, docs/simulate.md, and Figure 4 above): (1) "
        "the cost of the partial-rollout cutoff: with c = q extra fresh groups the bulk pool "
        "waits for the (N - q)-th completion, and the aborted groups occupy bulk slots until "
        f"then, wasting {wasted_lo:.0%}-{wasted_hi:.0%} of the generated tokens; (2) the "
        "next-step capture of the selector is far below the same-round capture (Figure 3), so "
        "many of the q regenerated groups are not long the next time while new long groups stay "
        "in the bulk pool; (3) on the GPU profile tau(b) is nearly flat up to b ~ 16, so "
        "isolating the tail buys little per-token speed; (4) the controller's model picks a "
        "smaller q than the simulated optimum (Figure 4). The top-k oracle (true lengths, best "
        f"static (q, m), no cutoff) shows the ceiling of tail isolation itself: {tk_lo:.2f}-"
        f"{tk_hi:.2f}x steady.", ""]
    return lines, summary


def ceiling(out_dir: Path) -> tuple[list[str], list[str]]:
    r = _load(out_dir, "protocol_ceiling")
    if r is None:
        return [], []
    st = r["settings"]
    lines = ["## The protocol's ceiling: best static (q, m) versus the 90%-of-top-k targets", ""]
    lines += _header(r, out_dir, "protocol_ceiling")
    lines += [f"R = {st['replicas']}, N = {st['groups']}, n = {st['group_size']}, "
              f"{st['profile']} profile, {st['steps']} steps, seeds {st['seeds']}; mean speedup "
              "over Uniform (steps 1..S-1, paired per seed, then averaged). Every grid point "
              f"({len(st['grid'])} (q, m) pairs) runs TailSieve's real step protocol "
              "with (q, m) held (`tailsieve-static`, c = q); the best point is chosen per "
              "workload by its seed mean. No controller choosing (q, m) per step can do much "
              "better than the best static point unless the steps differ a lot, so this bounds "
              "what controller work can buy.", "",
              "| workload | uniform-oracle | top-k oracle | target (90% of top-k gain) "
              "| best static (q, m): mean [steady] | its share of the top-k gain "
              "| tailsieve: mean [steady] | tailsieve-fixed |",
              "|---|---|---|---|---|---|---|---|"]
    summary = []
    for wl, res in r["results"].items():
        ref, best = res["reference"], res["best_static"]
        share = res["best_static_share_of_topk_gain"]
        lines.append(
            f"| {wl} | {_x(ref['uniform-oracle']['mean_speedup'])} "
            f"| {_x(ref['topk-oracle']['mean_speedup'])} "
            f"| {_x(res['target_speedup_90pct_of_topk'])} "
            f"| ({best['q']}, {best['m']}{', spread' if best.get('spread') else ''}): "
            f"{_x(best['mean_speedup'])} "
            f"[{_x(best['steady_speedup'])}] "
            f"| {'–' if share is None else _pct(share, 0)} "
            f"| {_x(ref['tailsieve']['mean_speedup'])} [{_x(ref['tailsieve']['steady_speedup'])}] "
            f"| {_x(ref['tailsieve-fixed']['mean_speedup'])} |")
        summary.append(
            f"| 90%-of-top-k target on {wl} (R = 8, N = 64, GPU profile): 90% of top-k gain = "
            f"{_x(res['target_speedup_90pct_of_topk'])} | – | best static (q, m) through the "
            f"protocol {_x(best['mean_speedup'])}, tailsieve {_x(ref['tailsieve']['mean_speedup'])}"
            f" | {'reachable' if best['mean_speedup'] >= res['target_speedup_90pct_of_topk'] else 'above the protocol ceiling'} |")
    worst = min(r["results"].items(),
                key=lambda kv: kv[1]["reference"]["tailsieve"]["steady_speedup"])
    worst_mean = min(res["reference"]["tailsieve"]["mean_speedup"]
                     for res in r["results"].values())
    lines += ["", f"TailSieve against Uniform at this setting, every workload: steady speedup "
              f"at least {_x(worst[1]['reference']['tailsieve']['steady_speedup'])} ({worst[0]}), "
              f"mean over steps 1..S-1 at least {_x(worst_mean)}.", ""]
    lines += ["", "Per grid point (mean speedup, seed mean):", "",
              "| m \\ q | " + " | ".join(f"q = {k}m" for k in (1, 2, 3, 4, 6)) + " |",
              "|---|---|---|---|---|---|"]
    for wl, res in r["results"].items():
        by_m: dict[tuple[int, bool], dict[int, float]] = {}
        balance = [x for x in res["static"] if x["m"] == 0]
        for x in res["static"]:
            if x["m"] > 0:
                by_m.setdefault((x["m"], bool(x.get("spread"))), {})[x["q"] // x["m"]] = \
                    x["mean_speedup"]
        extra = f" (balance, m = 0 spread: {_x(balance[0]['mean_speedup'])})" if balance else ""
        lines.append(f"| **{wl}**{extra} | | | | | |")
        for (m, spread), row in sorted(by_m.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            tag = " spread" if spread else ""
            lines.append(f"| m = {m}{tag} | " + " | ".join(
                _x(row[k]) if k in row else "–" for k in (1, 2, 3, 4, 6)) + " |")
    lines.append("")
    return lines, summary


def ablation(out_dir: Path) -> tuple[list[str], list[str]]:
    """The grounded GPU profiles, the must-show table and the lever ablations."""
    r = _load(out_dir, "spread_ablation")
    if r is None:
        return [], []
    st = r["settings"]
    lines = ["## Grounded GPU profiles: spread groups and balance", ""]
    lines += _header(r, out_dir, "spread_ablation")
    lines += [f"N = {st['groups']} x {st['group_size']}, {st['steps']} steps, seeds "
              f"{st['seeds']}; controller from q0 = 1, m0 = 0. Speedup over Uniform: per seed "
              "the mean paired per-step ratio over the steady steps (t >= 5), seed mean with a "
              "95% Student-t interval; the paper's last-three-steps column beside it. Nothing "
              "but the oracles reads a length.", "",
              "| profile, R, workload | uniform-oracle | seer-oracle | top-k oracle "
              "| tailsieve (spread) | last 3 | wasted tokens | tailsieve, whole groups "
              "| best static point | controller vs best static |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    summary = []
    for c in r["cases"]:
        rows = c["rows"]

        def ci(row: dict[str, Any]) -> str:
            lo, hi = row["ci95"]
            return _x(row["speedup"]) + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None else "")

        ts = rows["tailsieve"]
        best = rows[c["best_static"]]
        lines.append(
            f"| {c['profile']}, R = {c['replicas']}, {c['workload']} "
            f"| {_x(rows['uniform-oracle']['speedup'])} | {_x(rows['seer-oracle']['speedup'])} "
            f"| {_x(rows['topk-oracle']['speedup'])} | **{ci(ts)}** "
            f"| {_x(ts['last3_speedup'])} | {_pct(ts['wasted_token_fraction'])} "
            f"| {_x(rows['tailsieve-groups']['speedup'])} "
            f"| {c['best_static'].removeprefix('static ')}: {_x(best['speedup'])} "
            f"| {c['controller_gap_to_best_static']:+.1%} |")
        summary.append(
            f"| Grounded, {c['profile']}, R = {c['replicas']}, {c['workload']}: tailsieve "
            f"vs Uniform Oracle | {_x(rows['uniform-oracle']['speedup'])} | tailsieve "
            f"{_x(ts['speedup'])} | {'above' if c['beats_uniform_oracle'] else 'below'} |")
    lines += ["", "Ablation: every static point of the grid through the protocol "
              "(`tailsieve-static`, same prompts and seeds; c = extra groups launched for the "
              "cutoff, spread = single responses dealt over the pool, groups = whole groups). "
              "In brackets: tokens wasted on aborted attempts, and the mean delivered response "
              "length over the steady steps relative to Uniform's on the same prompts (below 1 = "
              "a routing-induced length bias: a cutoff delivers the first attempts that finished "
              "early):", ""]
    names = [k for k in r["cases"][0]["rows"] if k.startswith("static")]
    lines += ["| point | " + " | ".join(f"{c['workload']} R={c['replicas']}"
                                        for c in r["cases"]) + " |",
              "|---|" + "---|" * len(r["cases"])]
    for k in names:
        cells = []
        for c in r["cases"]:
            row = c["rows"].get(k)
            ratio = row.get("delivered_length_ratio") if row else None
            cells.append("–" if row is None else
                         f"{_x(row['speedup'])} ({_pct(row['wasted_token_fraction'], 0)}"
                         + (f", len {ratio:.3f})" if ratio is not None else ")"))
        lines.append(f"| {k.removeprefix('static ')} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines, summary


def spec(out_dir: Path) -> tuple[list[str], list[str]]:
    r = _load(out_dir, "spec_budget")
    if r is None:
        return [], []
    st = r["settings"]
    lines = ["## Section 4.3: route-specialised speculation budgets (d_bulk + d_tail = 2 d_base)",
             ""]
    lines += _header(r, out_dir, "spec_budget")
    lines += [f"`{st['workload']}`, {st['profile']} profile, MTP (acceptance 0.75 per drafted "
              f"token, draft cost 0.04), R = {st['replicas']}, N = {st['groups']}, "
              f"{st['steps']} steps, seeds {st['seeds']}. Mean speedup over steps 1..S-1 versus "
              "plain Uniform without speculation (steady speedup in brackets).", "",
              "| d_base | Uniform (d_base everywhere) | d_bulk / d_tail | topk-oracle | "
              "tailsieve-fixed | tailsieve |", "|---|---:|---|---:|---:|---:|"]
    table = r["table"]
    best: dict[str, tuple[float, str]] = {}
    for d_base in sorted({x["d_base"] for x in table}):
        uni = next(x for x in table if x["d_base"] == d_base and x["policy"] == "uniform")
        splits = sorted({(x["d_bulk"], x["d_tail"]) for x in table
                         if x["d_base"] == d_base and x["policy"] != "uniform"},
                        key=lambda t: t[1])
        for i, (db, dt) in enumerate(splits):
            cells = []
            for pol in ("topk-oracle", "tailsieve-fixed", "tailsieve"):
                x = next(y for y in table if y["d_base"] == d_base and y["policy"] == pol
                         and y["d_bulk"] == db and y["d_tail"] == dt)
                cells.append(f"{_x(x['mean_speedup'])} [{_x(x['steady_speedup'])}]")
                if x["mean_speedup"] > best.get(pol, (0.0, ""))[0]:
                    best[pol] = (x["mean_speedup"], f"d_bulk {db} / d_tail {dt}")
            u = (f"{_x(uni['mean_speedup'])} [{_x(uni['steady_speedup'])}]" if i == 0 else "")
            lines.append(f"| {d_base if i == 0 else ''} | {u} | {db} / {dt} | " +
                         " | ".join(cells) + " |")
        if uni["mean_speedup"] > best.get("uniform", (0.0, ""))[0]:
            best["uniform"] = (uni["mean_speedup"], f"d = {d_base}")
    beats = sum(
        1 for d_base in {x["d_base"] for x in table}
        if max(x["mean_speedup"] for x in table if x["d_base"] == d_base
               and x["policy"] == "tailsieve")
        > next(x["mean_speedup"] for x in table if x["d_base"] == d_base
               and x["policy"] == "uniform"))
    n_budgets = len({x["d_base"] for x in table})
    tk_beats = sum(
        1 for d_base in {x["d_base"] for x in table}
        if max(x["mean_speedup"] for x in table if x["d_base"] == d_base
               and x["policy"] == "topk-oracle")
        > next(x["mean_speedup"] for x in table if x["d_base"] == d_base
               and x["policy"] == "uniform"))
    lines += ["", "Best per policy: " + "; ".join(f"{k} {v[0]:.3f}x at {v[1]}"
                                                    for k, v in best.items()) + ".", "",
              f"TailSieve's best split beats Uniform with the same budget at {beats} of "
              f"{n_budgets} budgets (paper: at every budget; routing + MTP 2.16-2.59x). The "
              f"top-k oracle's best split beats Uniform at {tk_beats} of {n_budgets} budgets: "
              "that is the mechanism the paper describes (a deeper draft pays on the low-concurrency "
              "tail pool), but TailSieve's own routing penalty (Tables 1/4) eats most of it. "
              "The absolute speedups depend on the assumed acceptance rate and draft cost, which "
              "are illustrative defaults, not measurements.", ""]
    summary = [f"| Sec. 4.3 best speculation split vs same-budget Uniform | routing+MTP "
               f"2.16-2.59x, beats Uniform at every budget | TailSieve best "
               f"{best.get('tailsieve', (0, ''))[0]:.3f}x, Uniform best "
               f"{best.get('uniform', (0, ''))[0]:.3f}x, top-k oracle best "
               f"{best.get('topk-oracle', (0, ''))[0]:.3f}x; TailSieve beats Uniform at {beats}/"
               f"{n_budgets} budgets | {'matched' if beats == n_budgets else 'not matched'} |"]
    return lines, summary


def drift(out_dir: Path) -> tuple[list[str], list[str]]:
    r = _load(out_dir, "drift")
    if r is None:
        return [], []
    st = r["settings"]
    lines = ["## Section 4.5: a drifting workload over 30 steps", ""]
    lines += _header(r, out_dir, "drift")
    lines += [f"{st['workload']}, {st['profile']} profile, R = {st['replicas']}, N = "
              f"{st['groups']}, {st['steps']} steps, seeds {st['seeds']}.", "",
              "| scenario | median length step 0 -> last | mean step time uniform / topk-oracle"
              " / tailsieve | TailSieve mean speedup | steps TailSieve faster (of S-1) | paper |",
              "|---|---|---|---:|---|---|"]
    summary = []
    for label, sc in r["scenarios"].items():
        ms = sc["mean_step_s"]
        a, b = sc["median_length_first_last"]
        lines.append(
            f"| {label} | {a:.0f} -> {b:.0f} | {ms['uniform']:.1f} / {ms['topk-oracle']:.1f} / "
            f"{ms['tailsieve']:.1f} s | {_x(sc['mean_speedup']['tailsieve'])} | "
            f"{sc['steps_tailsieve_faster']} of {st['steps'] - 1} | 119.3 -> 82.5 s (1.45x) |")
        summary.append(f"| Sec. 4.5 drift ({label}) | 1.45x over 30 steps | "
                       f"{_x(sc['mean_speedup']['tailsieve'])} (top-k oracle "
                       f"{_x(sc['mean_speedup']['topk-oracle'])}) | "
                       f"{'matched' if sc['mean_speedup']['tailsieve'] >= 1.1 else 'not matched'} |")
    lines += ["", "The controller keeps working as the length distribution shifts (its q "
              "and m follow the workload; see the JSON), but since TailSieve's steady gain in "
              "this simulator is about 1.0x (Tables 1/4), there is no 1.45x gain to persist. "
              "The paper's number is end-to-end GRPO on H100s; this is a simulated analog.", ""]
    return lines, summary


def bias(out_dir: Path) -> tuple[list[str], list[str]]:
    r = _load(out_dir, "bias_check")
    if r is None:
        return [], []
    lines = ["## Section 3.3: no routing-induced change of what training consumes", ""]
    lines += _header(r, out_dir, "bias_check")
    lines += ["| workload | delivered = drawn, duplicates | max delay (steps) | Uniform's prompts "
              "missing in TailSieve | KS D, p (steps 1..S-1) | KS D, p (whole run) | mean length "
              "uniform / tailsieve | per-step tail share min-max | per-step mean-length ratio "
              "min-max |", "|---|---|---|---|---|---|---|---|---|"]
    summary = []
    for wl, c in r["cases"].items():
        comp = c["composition"]
        lines.append(
            f"| {wl} | {comp['tailsieve_delivered_equals_drawn']}, "
            f"{comp['tailsieve_duplicates']} | {comp['max_delay_steps']} | "
            f"{comp['uniform_not_in_tailsieve']} | {c['ks_statistic']:.4f}, {c['ks_pvalue']:.3f} | "
            f"{c['ks_whole_run_statistic']:.4f}, {c['ks_whole_run_pvalue']:.3f} | "
            f"{c['uniform_length']['mean']:.0f} / {c['tailsieve_length']['mean']:.0f} | "
            f"{_pct(c['tail_share_min'])}-{_pct(c['tail_share_max'])} | "
            f"{c['per_step_mean_length_ratio_min']:.2f}-{c['per_step_mean_length_ratio_max']:.2f}"
            " |")
        ok = (comp["tailsieve_delivered_equals_drawn"] and comp["max_delay_steps"] <= 1
              and comp["uniform_not_in_tailsieve"] == 0 and c["ks_pvalue"] > 0.05
              and c["tail_share_min"] > 0)
        summary.append(f"| Sec. 3.3 composition and length bias ({wl}) | same prompts, no bias |"
                       f" KS p = {c['ks_pvalue']:.2f}, max delay {comp['max_delay_steps']}, tail "
                       f"share {_pct(c['tail_share_min'], 0)}-{_pct(c['tail_share_max'], 0)} | "
                       f"{'matched' if ok else 'not matched'} |")
    lines += ["", "Every prompt TailSieve draws is delivered exactly once, at most one step "
              "late, and every prompt Uniform delivers is delivered by TailSieve (the extras are "
              "the last step's surplus, delivered by the flush). The KS test does not detect a "
              "difference in the delivered response lengths, and every steady batch contains "
              "regenerated tail groups. Per step the mean length differs by the noise of which "
              "long prompts land in that step (ratio range above), not systematically.", ""]
    return lines, summary


def real_engine(results_root: Path) -> list[str]:
    js, md = results_root / "real_engine" / "real_engine.json", results_root / "real_engine" / "real_engine.md"
    lines = ["## Real engines: two vLLM CPU servers", ""]
    if not js.is_file():
        return [*lines, "No `benchmarks/results/real_engine/real_engine.json` yet. Run "
                f"`{CMD} --real-engine` (starts two vLLM CPU servers; see "
                "`benchmarks/bench_real_engine.py`).", ""]
    when = datetime.fromtimestamp(js.stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines += [f"Results from `benchmarks/results/real_engine/real_engine.json`, measured {when} by "
              "`benchmarks/bench_real_engine.py` (rerun with `--real-engine`).", ""]
    if md.is_file():
        body = md.read_text().strip().splitlines()
        lines += [("#" + ln if ln.startswith("#") else ln) for ln in body]
    else:
        data = json.loads(js.read_text())
        lines += ["```json", json.dumps({k: v for k, v in data.items()
                                         if not isinstance(v, list | dict)}, indent=2), "```"]
    return [*lines, ""]


def decode_model() -> list[str]:
    """The grounded GPU decode model against public measurements (computed, no results file)."""
    return [
        "## The GPU decode model against public measurements",
        "",
        "`tau(b, C) = a0 + R(W(b)/BW_eff, b*F/P_eff) + k*C + c_s*b` from a model's config.json "
        "and the GPU's datasheet (docs/performance-model.md); the shipped profiles "
        "(`tailsieve profiles`) are made with it. Regenerate with `tailsieve profiles validate`; "
        "the tolerances are asserted by `tests/model/test_decode_validation.py`. The linear "
        "rows are a fit-quality check (three efficiencies come from that Vidur table); the "
        "attention, batch-1 and TPOT rows are predictions.",
        "",
        *markdown_table(),
        "",
    ]


def write(out_dir: Path, path: Path, suite: dict[str, Any] | None = None) -> Path:
    """Write the markdown file ``path`` from the JSON results in ``out_dir``."""
    sections, summary = [], []
    for fn in (fig2, fig3, fig4, fig6b, tables, ceiling, ablation, spec, drift, bias):
        s, rows = fn(out_dir)
        sections += s
        summary += rows
        if fn is ablation:
            sections += report_extra.length_blind(out_dir)
    suite = suite or (_load(out_dir, "suite") or {})
    m = suite.get("machine", {})
    head = [
        "# TailSieve benchmarks: this project beside the paper",
        "",
        "Generated by `benchmarks/run_all.py` from `benchmarks/results/paper/*.json`; do not "
        "edit by hand. One command regenerates everything:",
        "",
        "```bash",
        f"{CMD}            # full: ~6 min here under load (~2 min of CPU)",
        f"{CMD} --quick    # fewer draws / steps / seeds: ~25 s of CPU, 1-5 min under load",
        f"{CMD} --real-engine   # also the two-vLLM-server comparison",
        f"{CMD} --only fig2_oracle,bias_check   # a subset",
        "```",
        "",
        f"Last run: {suite.get('mode', '?')} configuration, {m.get('date_utc', '?')}, "
        f"{suite.get('runtime_s', 0):.0f} s in total, on {m.get('cpus', '?')} CPUs "
        f"({m.get('platform', '?')}, Python {m.get('python', '?')}, numpy "
        f"{m.get('numpy', '?')}). The machine is shared, so wall times are noisy; the "
        "simulated results are deterministic given the seeds.",
        "",
        "Everything except the real-engine section is simulated: all-admit decode replicas "
        f"with the shipped `{DEFAULT_PROFILE}` / `cpu` throughput profiles, the project's step protocol and "
        "controller, synthetic `paper-math` lengths (calibrated to the paper's math workload) "
        "and the real AIME R1-Distill-1.5B lengths. The paper measures 8x H100 with vLLM. A "
        "figure the project does not match is reported as measured, with the reason; nothing "
        "was tuned to hit a target.",
        "",
        "## Summary",
        "",
        "| item | paper | this project | status |",
        "|---|---|---|---|",
        *summary,
        "",
    ]
    root = out_dir.parent
    body = (head + sections + real_engine(root) + decode_model()
            + report_extra.grounded_profiles(root) + report_extra.grounded_suite(root)
            + report_extra.router_cluster(root))
    path.write_text(relink_images("\n".join(body).rstrip() + "\n", REPO, path.parent))
    return path
