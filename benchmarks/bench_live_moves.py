"""Moves per step, live against simulated on the same plans: does the live rebalancer decide as
the simulator does?

::

    PYTHONPATH=src:benchmarks python benchmarks/bench_live_moves.py --emulate 2 --steps 4 \\
        --out benchmarks/results/live_moves/emulated-r2

1. Servers: ``--endpoints URL,URL`` uses running servers (real vLLM CPU servers); otherwise
   ``--emulate R`` (default 2) emulated replicas are started.
2. Profile: the servers' decode curve in lockstep and the time to first token
   (``real_engine.profiles``): the controller's profile and the simulator's replicas.
3. Live: ``--steps`` steps of the ``tailsieve+moves`` lane (the ``tailsieve`` controller, a
   balance step every step, continuation pieces of ``--piece-tokens``) on forced lengths
   (AIME, replay mode). Every balance check is recorded (``core.balance_trace``): the loads
   it read, the moves it planned and made; and the moves that took effect (a response's next
   piece began on another replica).
4. Sim: ``SimExecutor`` on exactly each live plan and lengths, with its own moves (pieces as
   the live lane ran them), its checks recorded the same way.
5. Check by check (``core.trace_compare``): each step's live and simulated checks paired in
   order by their place in the step (the simulated times scaled by the live step's length
   over the simulated one's); where they part (the state seen, the candidates, the gains, the decisions,
   whether a move took effect), and the first check where their moves part.

Written to ``--out``: ``live_moves.json`` (per step: live and simulated moves by decision and
taken effect, checks, where the two part, every check of both; the ratio live / sim in total)
and ``live_moves.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from outdir import default_out
from real_engine.live import LaneSpec, MoveSettings, run_interleaved
from real_engine.predict import sim_pools
from real_engine.profiles import measure
from real_engine.servers import Servers, log, prompt_tokens, served_model

from tailsieve.core.trace_compare import compare
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.runtime.step.replay import ReplayLengths
from tailsieve.sim.executor import SimExecutor
from tailsieve.sim.movepath import PieceSettings
from tailsieve.workload.presets import AIME_TRACE_IN_REPO


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=default_out("live_moves"))
    p.add_argument("--endpoints", default="", help="comma-separated running servers")
    p.add_argument("--emulate", type=int, default=2, help="emulated replicas (no --endpoints)")
    p.add_argument("--emulate-time-scale", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--groups", type=int, default=6)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--piece-tokens", type=int, default=128)
    p.add_argument("--seam-s", type=float, default=0.066)
    p.add_argument("--piece-seam-s", type=float, default=0.014)
    p.add_argument("--max-response-tokens", type=int, default=None)
    p.add_argument("--batch-sizes", default="1,4,16")
    p.add_argument("--profile-tokens", type=int, default=300)
    p.add_argument("--trace", default=str(AIME_TRACE_IN_REPO))
    return p.parse_args(argv)


async def amain(args: argparse.Namespace, endpoints: list[str], kind: str) -> dict[str, Any]:
    model, max_len = await served_model(endpoints[0])
    n, groups, steps = args.group_size, args.groups, args.steps
    raw = ReplayLengths.from_file(args.trace)
    prompt_ids = list(raw.lengths)[: groups * (steps + 2) * 2]
    ptoks = await prompt_tokens(endpoints[0], model, prompt_ids)
    budget = max_len - (max(ptoks.values()) if ptoks else 16)
    if args.max_response_tokens:
        budget = min(budget, args.max_response_tokens)
    scale = budget / max(max(v) for v in raw.lengths.values())
    lengths = ReplayLengths(raw.lengths, length_scale=scale, min_tokens=1, max_tokens=budget)
    prompts = [PromptInput(pid, text=pid) for pid in prompt_ids]
    bs = tuple(int(b) for b in args.batch_sizes.split(","))
    log(f"profiling {len(endpoints)} servers ({kind})")
    prof = await measure(endpoints, model, bs, tokens=args.profile_tokens, repeats=1,
                         ttft_repeats=3, out_dir=args.out, label="before",
                         prompt=prompts[0].text or "")
    mean_path = args.out / "profile_mean.json"
    prof.mean_model().save(mean_path)
    spec = LaneSpec.parse("tailsieve+moves")
    mv = MoveSettings(args.piece_tokens, args.seam_s)
    live = (await run_interleaved([spec], endpoints, model, lengths, prompts, groups, n, steps,
                                  str(mean_path), {}, mv))[spec.name]
    sim = SimExecutor(sim_pools(prof.mean_model(), prof.prefill_s),
                      pieces=PieceSettings(args.piece_tokens, args.piece_seam_s),
                      trace_checks=True)
    rows = []
    for s in live:
        o = sim.run(s.plan, lambda pid, _st: [lengths(pid, j) for j in range(n)])
        tr = sim.last_trace
        gap = s.plan.balance.interval_s / 2 if s.plan.balance is not None else None
        pace = s.outcome.makespan_s / o.makespan_s if o.makespan_s > 0 else 1.0
        cmp = (compare(s.trace, tr, gap, sim_time_scale=pace)
               if s.trace is not None and tr is not None else None)
        rows.append({
            "step": s.plan.step, "is_flush": s.plan.is_flush, "balance": s.plan.balance is not None,
            "live_moves_asked": s.num_moves, "live_moves": s.num_effective,
            "sim_moves": o.num_moves,
            "live_makespan_s": round(s.outcome.makespan_s, 3), "sim_makespan_s":
            round(o.makespan_s, 3), "checks": cmp,
            "live_checks": [c.as_dict() for c in s.trace.checks] if s.trace else [],
            "sim_checks": [c.as_dict() for c in tr.checks] if tr else [],
        })
        log(f"step {s.plan.step}: live {s.num_effective} moves ({s.num_moves} asked), "
            f"sim {o.num_moves}")
    reg = [r for r in rows if r["balance"]]
    live_total = sum(r["live_moves"] for r in reg)
    sim_total = sum(r["sim_moves"] for r in reg)
    by_decision = {side: _sum_counts(r["checks"]["moves"][side] for r in reg if r["checks"])
                   for side in ("live", "sim")}
    partings = _sum_counts(r["checks"]["partings_by_kind"] for r in reg if r["checks"])
    return {
        "what": "moves per step that took effect, live rebalancer vs the simulator on the "
                "same plans and forced lengths",
        "command": "python benchmarks/bench_live_moves.py " + shlex.join(sys.argv[1:]),
        "servers": kind, "endpoints": endpoints, "model": model, "groups": groups,
        "group_size": n, "steps": steps, "piece_tokens": args.piece_tokens,
        "seam_s": args.seam_s, "length_scale": round(scale, 5), "max_forced_tokens": budget,
        "profile": prof.summary(), "nproc": os.cpu_count(),
        "balance_steps": len(reg),
        "live_moves_per_step": round(live_total / max(len(reg), 1), 2),
        "sim_moves_per_step": round(sim_total / max(len(reg), 1), 2),
        "ratio_live_over_sim": round(live_total / sim_total, 3) if sim_total else None,
        "moves_by_decision": by_decision, "partings_by_kind": partings,
        "steps_detail": rows,
    }


def write_md(res: dict[str, Any], path: Path) -> None:
    lines = [
        "# Live vs simulated moves per step", "",
        f"`{res['command']}`", "",
        f"Servers: {res['servers']} ({len(res['endpoints'])}), model `{res['model']}`, "
        f"N={res['groups']} x n={res['group_size']}, pieces of {res['piece_tokens']} tokens, "
        f"forced lengths <= {res['max_forced_tokens']} tokens.", "",
        f"**Moves per step (took effect): live {res['live_moves_per_step']}, sim "
        f"{res['sim_moves_per_step']}; ratio live/sim {res['ratio_live_over_sim']}** over "
        f"{res['balance_steps']} balance steps.", "",
        "| step | live moves | (asked) | sim moves | live checks | sim checks | live imbalance "
        "| sim imbalance | live makespan s | sim makespan s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["steps_detail"]:
        c = r["checks"] or {"live": {}, "sim": {}}
        lines.append(
            f"| {r['step']}{' (flush)' if r['is_flush'] else ''} | {r['live_moves']} | "
            f"{r['live_moves_asked']} | {r['sim_moves']} | {c['live'].get('num_checks', '-')} "
            f"| {c['sim'].get('num_checks', '-')} | {c['live'].get('mean_imbalance', '-')} | "
            f"{c['sim'].get('mean_imbalance', '-')} | {r['live_makespan_s']} | "
            f"{r['sim_makespan_s']} |")
    lines += ["", "## Check by check", "",
              f"Moves by decision over the balance steps: live {res['moves_by_decision']['live']}"
              f", sim {res['moves_by_decision']['sim']}. Paired checks that part, by what "
              f"differed: {res['partings_by_kind']}.", "",
              "| step | pairs | partings (state / candidate / gain / decision / effect / "
              "unpaired) | first check whose moves part: live t, sim t | what differed |",
              "|---:|---:|---|---|---|"]
    for r in res["steps_detail"]:
        c = r["checks"]
        if not c:
            continue
        k = c["partings_by_kind"]
        first = c["first_move_parting"]
        where = "-" if first is None else " / ".join(
            "-" if x is None else f"{x['t_s']} s ({_moves_text(x)})"
            for x in (first["live"], first["sim"]))
        lines.append(f"| {r['step']} | {c['num_pairs']} | {k['state']} / {k['candidate']} / "
                     f"{k['gain']} / {k['decision']} / {k['effect']} / {k['unpaired']} | "
                     f"{where} | {', '.join(first['kinds']) if first else '-'} |")
    path.write_text("\n".join(lines) + "\n")


def _moves_text(check: dict[str, Any]) -> str:
    """A check's moves as ``response src->dst decision[, took effect]``."""
    return "; ".join(
        f"{m['response'][0]}#{m['response'][1]} {m['src']}->{m['dst']} {m['decision']}"
        f"{' +' if m['effective_s'] is not None else ''}" for m in check["moves"]) or "none"


def _sum_counts(counts: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    given = [u for u in args.endpoints.split(",") if u]
    with Servers(given, 0 if given else args.emulate, args.emulate_time_scale,
                 default_out("live_moves-server-logs")) as srv:
        res = asyncio.run(amain(args, srv.endpoints, srv.kind))
    (args.out / "live_moves.json").write_text(json.dumps(res, indent=2) + "\n")
    write_md(res, args.out / "live_moves.md")
    print(f"moves per step: live {res['live_moves_per_step']}, sim {res['sim_moves_per_step']}, "
          f"ratio {res['ratio_live_over_sim']}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
