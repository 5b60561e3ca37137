"""``real_engine.md``: the summary table, the ordering check and the per-step error table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from real_engine.predict import AFTER, JUDGED, NO_PREFILL, PRIMARY


def markdown(res: dict[str, Any]) -> str:
    pols: dict[str, Any] = res["policies"]
    prof = res["profiles"]
    lines = [
        "# Real engine vs simulator",
        "",
        f"{len(res['endpoints'])} replicas ({res['servers']}, model `{res['model']}`), "
        f"N = {res['groups']} groups x n = {res['group_size']}, {res['steps']} steps per policy "
        "(+ a flush where prompts are carried), policies interleaved step by step, "
        + (f"natural lengths (chat prompts `{res.get('prompts')}`, temperature 1, EOS, <= "
           f"{res['max_forced_tokens']} tokens; the simulator replays the lengths each lane "
           "produced). " if res.get("natural") else
           f"AIME lengths x {res['length_scale']:.5f} (<= {res['max_forced_tokens']} tokens), "
           "replay (ignore_eos). ")
        + "Simulator: `SimExecutor` on exactly the live plans and lengths (a "
        "`+moves` lane: the live plans with the simulator's own moves). Every lane is predicted "
        "from the same lockstep profiles (batch sizes "
        f"{res['settings']['batch_sizes']}, {res['settings']['profile_tokens']} tokens, "
        f"{res['settings']['profile_repeats']} repeat(s); prefill = measured time to first "
        f"token, {prof['before']['prefill_s']:.4f} s before): judged on the mean of the "
        f"profiles measured around each round ({res.get('profile_times', 2)} "
        "profiles: before the live steps, "
        + ("between rounds, " if res.get("profile_between") else "")
        + "after them); 'profile before' is the one profile the controllers used. "
        f"Command: `{res['command']}`.",
        "",
        "| policy | live mean step | simulated | error | error per step | profile before: "
        "simulated, error | closed-loop sim total vs live | moves per step live / sim |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p, d in pols.items():
        lo, hi = d["step_rel_err_range"]
        reg = [r for r in d["steps"] if not r["is_flush"]] or d["steps"]
        mv_live = sum(r.get("live_moves_effective", r.get("live_moves", 0))
                      for r in reg) / len(reg)  # moves that took effect (older files: asked)
        mv_sim = sum(r.get("sim_moves", 0) for r in reg) / len(reg)
        lines.append(
            f"| {p} | {d['live_mean_step_s']:.3f} s | {d['sim_mean_step_s'][JUDGED]:.3f} s | "
            f"{d['mean_step_rel_err'][JUDGED]:+.1%} | {lo:+.1%} to {hi:+.1%} | "
            f"{d['sim_mean_step_s'][PRIMARY]:.3f} s, {d['mean_step_rel_err'][PRIMARY]:+.1%} | "
            f"{d['closed_loop_sim']['total_rel_err_vs_live']:+.1%} | "
            f"{mv_live:.1f} / {mv_sim:.1f} |")
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
        "| policy | step | q | m | live | sim | error | sim, profile before | sim, profile "
        "after | sim, no prefill | moves live / sim | loadavg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p, d in pols.items():
        for r in d["steps"]:
            sm = r["sim_makespan_s"]
            lines.append(
                f"| {p} | {r['step']}{' (flush)' if r['is_flush'] else ''} | {r['q']} | "
                f"{r['m']} | {r['live_makespan_s']:.3f} | {sm[JUDGED]:.3f} | "
                f"{r['rel_err'][JUDGED]:+.1%} | {sm[PRIMARY]:.3f} | {sm[AFTER]:.3f} | "
                f"{sm[NO_PREFILL]:.3f} | {r.get('live_moves_effective', r.get('live_moves', 0))} / {r.get('sim_moves', 0)} | "
                f"{r['loadavg'].split()[0]} |")
        st = d["sim_total_s"]
        lines.append(
            f"| **{p} total** | | | | **{d['live_total_s']:.3f}** | **{st[JUDGED]:.3f}** | "
            f"**{d['total_rel_err'][JUDGED]:+.1%}** | {st[PRIMARY]:.3f} | {st[AFTER]:.3f} | "
            f"{st[NO_PREFILL]:.3f} | | |")
    lines += ["", "Profiles (mean over servers, tau in ms per decode step; b: value):", ""]
    for label, pr in [("before", prof["before"]), *[(f"between rounds {i}", b) for i, b in
                      enumerate(prof.get("between", []))], ("after", prof["after"])]:
        taus = ", ".join(f"{b}: {v * 1000:.2f}" for b, v in pr["mean_tau_s"].items())
        lines.append(f"- {label} ({', '.join(pr['files'])}): {taus}")
    return "\n".join(lines) + "\n"


def write(res: dict[str, Any], path: Path) -> None:
    path.write_text(markdown(res))
