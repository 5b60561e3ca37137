"""``real_engine.md``: the summary table, the ordering check and the per-step error table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from real_engine.predict import AFTER, NO_PREFILL, PRIMARY


def markdown(res: dict[str, Any]) -> str:
    pols: dict[str, Any] = res["policies"]
    prof = res["profiles"]
    lines = [
        "# Real engine vs simulator",
        "",
        f"{len(res['endpoints'])} replicas ({res['servers']}, model `{res['model']}`), "
        f"N = {res['groups']} groups x n = {res['group_size']}, {res['steps']} steps per policy "
        "(+ a flush where prompts are carried), policies interleaved step by step, AIME lengths "
        f"x {res['length_scale']:.5f} (<= {res['max_forced_tokens']} tokens), replay "
        "(ignore_eos). Simulator: `SimExecutor` on exactly the live plans and lengths, every "
        "policy from the same lockstep profile measured once before the live steps "
        f"(batch sizes {res['settings']['batch_sizes']}, {res['settings']['profile_tokens']} "
        f"tokens, {res['settings']['profile_repeats']} repeat(s)), prefill = measured time to "
        f"first token ({prof['before']['prefill_s']:.4f} s). Command: `{res['command']}`.",
        "",
        "| policy | live mean step | simulated | error | error per step | closed-loop sim "
        "total vs live |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p, d in pols.items():
        lo, hi = d["step_rel_err_range"]
        lines.append(
            f"| {p} | {d['live_mean_step_s']:.3f} s | {d['sim_mean_step_s'][PRIMARY]:.3f} s | "
            f"{d['mean_step_rel_err'][PRIMARY]:+.1%} | {lo:+.1%} to {hi:+.1%} | "
            f"{d['closed_loop_sim']['total_rel_err_vs_live']:+.1%} |")
    drift = res["drift"]
    apart = ", ".join(f"{p} {d['drift_rel']:+.1%}" for p, d in pols.items())
    lines += [
        "",
        f"Profiling drift: the same profile measured again after the live steps predicts mean "
        f"steps {apart} apart from "
        f"the first: **drift {drift:.1%}** (tau(1) "
        f"{prof['before']['mean_tau_s']['1'] * 1000:.2f} -> "
        f"{prof['after']['mean_tau_s']['1'] * 1000:.2f} ms, prefill "
        f"{prof['before']['prefill_s']:.4f} -> {prof['after']['prefill_s']:.4f} s).",
        "",
        "| pair | live difference | simulated | live exceeds drift | same order |",
        "| --- | --- | --- | --- | --- |",
    ]
    for o in res["ordering"]:
        a, b = o["pair"]
        order = ("tie: identical plans" if o.get("identical_plans")
                 else "yes" if o["same_order"] else "NO")
        lines.append(f"| {a} vs {b} | {o['live_diff_rel']:+.1%} | {o['sim_diff_rel']:+.1%} | "
                     f"{'yes' if o['exceeds_drift'] else 'no'} | {order} |")
    judged = [o for o in res["ordering"] if o["exceeds_drift"] and not o.get("identical_plans")]
    noise = res.get("live_noise")
    lines += [
        "",
        f"Ordering right wherever the live difference exceeds the drift (pairs with different "
        f"plans): **{'yes' if res['ordering_ok'] else 'NO'}** ({len(judged)} of "
        f"{len(res['ordering'])} pairs judged)."
        + ("" if noise is None else
           f" Live noise: policies that ran identical plans differ live by up to "
           f"**{noise:.1%}**."),
        "",
        "Per step (live vs simulated makespan, seconds):",
        "",
        "| policy | step | q | m | live | sim | error | sim, profile after | sim, no prefill "
        "| loadavg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p, d in pols.items():
        for r in d["steps"]:
            sm = r["sim_makespan_s"]
            lines.append(
                f"| {p} | {r['step']}{' (flush)' if r['is_flush'] else ''} | {r['q']} | "
                f"{r['m']} | {r['live_makespan_s']:.3f} | {sm[PRIMARY]:.3f} | "
                f"{r['rel_err'][PRIMARY]:+.1%} | {sm[AFTER]:.3f} | {sm[NO_PREFILL]:.3f} | "
                f"{r['loadavg'].split()[0]} |")
        st = d["sim_total_s"]
        lines.append(
            f"| **{p} total** | | | | **{d['live_total_s']:.3f}** | **{st[PRIMARY]:.3f}** | "
            f"**{d['total_rel_err'][PRIMARY]:+.1%}** | {st[AFTER]:.3f} | {st[NO_PREFILL]:.3f} "
            "| |")
    lines += ["", "Profiles (mean over servers, tau in ms per decode step; b: value):", ""]
    for label in ("before", "after"):
        taus = ", ".join(f"{b}: {v * 1000:.2f}" for b, v in prof[label]["mean_tau_s"].items())
        lines.append(f"- {label} the live steps ({', '.join(prof[label]['files'])}): {taus}")
    return "\n".join(lines) + "\n"


def write(res: dict[str, Any], path: Path) -> None:
    path.write_text(markdown(res))
