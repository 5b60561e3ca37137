"""End to end on a real engine: live step times of several policies vs the simulator's prediction.

::

    .venv/bin/python benchmarks/bench_real_engine.py \\
        --policy uniform --policy uniform-requests --policy tailsieve \\
        --groups 5 --group-size 3 --steps 5     # writes under $TMPDIR/tailsieve-bench/

1. Servers: ``--endpoints URL,URL`` (default ``$TAILSIEVE_VLLM_ENDPOINTS``) uses running
   servers; ``--emulate R`` starts R emulated replicas (the ``cpu`` profile, for a quick check
   of the code path); otherwise two vLLM CPU servers are started with
   ``scripts/start_vllm_servers.sh 2`` and stopped at the end.
2. Profile: every server is measured with the project's profiler in lockstep (``tailsieve
   profile --endpoint A --endpoint B``: every round on all servers at once, the load of a live
   step), then the time to first token at b=1 (the per-request ``prefill_s`` the simulator
   charges). The controllers use this profile.
3. Live: ``--steps`` steps of every ``--policy`` (repeatable: any live policy, ``uniform``,
   ``uniform-requests``, ``tailsieve-fixed``, ``tailsieve``, ``tailsieve-static`` with ``--q0``
   and ``--m0``; ``tailsieve+moves`` runs ``tailsieve`` with continuation pieces of
   ``--piece-tokens`` and the live rebalancer, the controller pricing a move at ``--seam-s``)
   through ``TailSieveRollout`` in replay mode (``max_tokens = L``, ``ignore_eos``), interleaved
   step by step (round t: step t of each policy, the order rotating), then a flush for carried
   prompts. AIME lengths scaled so the longest fits ``max-model-len`` minus the prompt. Every
   batch is checked: N groups of n responses, each exactly its forced length
   (``finish_reason == "length"``), no prompt delivered twice.
4. Drift: the same profile is measured again after the live steps (and, with
   ``--profile-between``, between rounds); the difference between the predictions of each
   policy's mean step from the first and the last profile is the profiling drift, its own
   figure.
5. Prediction: ``SimExecutor`` on exactly the live plans and lengths (per step; a ``+moves``
   lane with the simulator's own moves), plus a closed-loop ``tailsieve simulate``-style run.
   Every policy is predicted from the same profiles: each round from the mean of the profiles
   measured just before and after it (the machine's speed over that window; the judged figure),
   and also from the first profile alone and the last alone. The simulator's ordering of the
   policies is checked against live for every pair whose live difference exceeds the drift.

Everything is written under ``--out`` (default: a folder in the system temp directory, never
inside the repository): ``real_engine.json``, ``real_engine.md`` and the profile files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from outdir import command_line, default_out
from real_engine import report
from real_engine.live import (
    LaneSpec,
    MoveSettings,
    ProducedLengths,
    lane_controller,
    run_interleaved,
)
from real_engine.predict import (
    JUDGED,
    PRIMARY,
    closed_loop_sim,
    policy_result,
    sim_pools,
    summarize_ordering,
)
from real_engine.profiles import measure
from real_engine.servers import Servers, loadavg, log, prompt_tokens, served_model

from tailsieve.control.factory import ControllerName
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.runtime.prompt_file import read_prompt_set
from tailsieve.runtime.step.replay import ReplayLengths
from tailsieve.sim.movepath import PieceSettings
from tailsieve.workload.presets import AIME_TRACE_IN_REPO

LIVE_POLICIES = tuple(c.value for c in ControllerName)
MOVE_LANES = ("tailsieve+moves",)  # the policy whose controller balances, with moves on


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=default_out("real_engine"),
                   help="folder for every file written (default: under the system temp dir)")
    p.add_argument("--endpoints", default=os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", ""),
                   help="comma-separated running servers (default $TAILSIEVE_VLLM_ENDPOINTS)")
    p.add_argument("--emulate", type=int, default=0,
                   help="without --endpoints: start this many emulated replicas instead of vLLM")
    p.add_argument("--emulate-time-scale", type=float, default=1.0)
    p.add_argument("--policy", action="append", choices=LIVE_POLICIES + MOVE_LANES,
                   default=None,
                   help="a live policy (repeatable; default: uniform, uniform-requests, "
                        "tailsieve); tailsieve+moves: continuation pieces and the live "
                        "rebalancer")
    p.add_argument("--piece-tokens", type=int, default=128,
                   help="+moves lanes: max tokens per continuation piece")
    p.add_argument("--seam-s", type=float, default=0.066,
                   help="+moves lanes: the controller's price of one move beyond its prefill "
                        "(default: a move between the two vLLM CPU servers, bench_seam.py)")
    p.add_argument("--piece-seam-s", type=float, default=0.014,
                   help="+moves lanes: the simulator's wait at a piece end on the same server "
                        "(default: bench_seam.py's 38 ms seam less the 24 ms time to first "
                        "token the simulator already charges each piece)")
    p.add_argument("--profile-between", action="store_true",
                   help="also profile the servers between rounds (each round is then "
                        "predicted from the profiles just before and after it)")
    p.add_argument("--q0", type=int, default=None, help="initial tail groups (controllers)")
    p.add_argument("--m0", type=int, default=None,
                   help="initial tail replicas (tailsieve-static holds q0 and m0)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--groups", type=int, default=8, help="N groups per batch")
    p.add_argument("--group-size", type=int, default=4, help="n responses per group")
    p.add_argument("--length-scale", type=float, default=None,
                   help="AIME length scale (default: longest fits max-model-len - prompt)")
    p.add_argument("--max-response-tokens", type=int, default=None,
                   help="clip forced lengths to this (default: max-model-len - prompt)")
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32")
    p.add_argument("--profile-tokens", type=int, default=600)
    p.add_argument("--profile-repeats", type=int, default=3)
    p.add_argument("--ttft-repeats", type=int, default=7)
    p.add_argument("--trace", default=str(AIME_TRACE_IN_REPO))
    p.add_argument("--natural", action="store_true",
                   help="natural lengths: the shipped --prompts as chat prompts at temperature "
                        "1, EOS on, at most --max-tokens per response (no forced lengths); the "
                        "simulator replays the lengths each lane produced")
    p.add_argument("--prompts", default="math", help="--natural: prompt set (shipped or JSONL)")
    p.add_argument("--max-tokens", type=int, default=512, help="--natural: cap per response")
    p.add_argument("--report-only", action="store_true",
                   help="re-derive the ordering check and rewrite real_engine.md from "
                        "<out>/real_engine.json (no servers)")
    return p.parse_args(argv)


async def amain(args: argparse.Namespace, endpoints: list[str], servers: str,
                out: Path) -> dict[str, Any]:
    policies: list[str] = list(dict.fromkeys(args.policy or
                                             ["uniform", "uniform-requests", "tailsieve"]))
    specs = [LaneSpec.parse(name) for name in policies]
    model, max_len = await served_model(endpoints[0])
    n, groups, steps = args.group_size, args.groups, args.steps
    if args.natural:
        return await natural_main(args, endpoints, servers, out, specs, policies, model, max_len)
    raw = ReplayLengths.from_file(args.trace)
    # prompts in trace order: TailSieve draws N + c fresh per step; enough for every policy
    prompt_ids = list(raw.lengths)[: groups * (steps + 2) * 2]
    ptoks = await prompt_tokens(endpoints[0], model, prompt_ids)
    max_prompt = max(ptoks.values()) if ptoks else 16  # the emulator has no /tokenize
    budget = max_len - max_prompt
    if args.max_response_tokens:
        budget = min(budget, args.max_response_tokens)
    scale = args.length_scale or budget / max(max(v) for v in raw.lengths.values())
    lengths = ReplayLengths(raw.lengths, length_scale=scale, min_tokens=1, max_tokens=budget)
    prompts = [PromptInput(pid, text=pid) for pid in prompt_ids]
    log(f"model {model}, max_model_len {max_len}, longest prompt {max_prompt} tokens, length "
        f"scale {scale:.5f}, forced lengths <= {budget} tokens; policies {policies}")

    bs = tuple(int(b) for b in args.batch_sizes.split(","))
    prof = dict(tokens=args.profile_tokens, repeats=args.profile_repeats,
                ttft_repeats=args.ttft_repeats, out_dir=out, prompt=prompts[0].text or "")
    log("profiling all servers in lockstep (the one profile every prediction uses)")
    before = await measure(endpoints, model, bs, label="before", **prof)
    mean_path = out / "profile_mean_before.json"
    before.mean_model().save(mean_path)
    log(f"live: {steps} steps of N={groups} x n={n} per policy, interleaved")
    t0, load0 = time.perf_counter(), loadavg()
    overrides = {k: v for k, v in (("q0", args.q0), ("m0", args.m0)) if v is not None}
    between: list[Any] = []

    async def profile_between(t: int) -> None:
        log(f"profiling between rounds {t} and {t + 1}")
        between.append(await measure(endpoints, model, bs, label=f"between{t}", **prof))

    move_settings = MoveSettings(args.piece_tokens, args.seam_s)
    live = await run_interleaved(specs, endpoints, model, lengths, prompts, groups, n,
                                 steps, str(mean_path), overrides,
                                 move_settings,
                                 profile_between if args.profile_between else None)
    live_wall = time.perf_counter() - t0
    log("profiling again after the live steps (profiling drift)")
    after = await measure(endpoints, model, bs, label="after", **prof)

    per_policy: dict[str, Any] = {}
    model_before = before.mean_model()
    pieces = PieceSettings(args.piece_tokens, args.piece_seam_s)  # moves wait for piece ends
    for spec in specs:
        ctrl = lane_controller(spec, overrides, move_settings)
        closed = closed_loop_sim(spec.policy, sim_pools(model_before, before.prefill_s),
                                 model_before, lengths, prompt_ids, groups, n, len(endpoints),
                                 steps, ctrl, moves=spec.moves, pieces=pieces)
        per_policy[spec.name] = policy_result(live[spec.name], [before, *between, after],
                                              lengths, n, closed,
                                              pieces if spec.moves else None)
    drift = max(abs(d["drift_rel"]) for d in per_policy.values())
    res = {
        "what": "live steps vs SimExecutor on the same plans and lengths, policies interleaved, "
                "one profile for every prediction, drift from a second profile after",
        "command": command_line("benchmarks/bench_real_engine.py", sys.argv[1:]),
        "servers": servers,
        "endpoints": endpoints,
        "model": model,
        "max_model_len": max_len,
        "groups": groups, "group_size": n, "steps": steps, "policies_run": policies,
        "controller_overrides": overrides,
        "settings": {"batch_sizes": list(bs), "profile_tokens": args.profile_tokens,
                     "profile_repeats": args.profile_repeats,
                     "ttft_repeats": args.ttft_repeats},
        "length_scale": scale, "max_forced_tokens": budget,
        "trace": Path(args.trace).name,
        "prompt_ids": prompt_ids,
        "profiles": {"before": before.summary(), "after": after.summary(),
                     "between": [b.summary() for b in between],
                     "controller_profile_file": mean_path.name},
        "profile_between": bool(args.profile_between),
        "profile_times": len(between) + 2,
        "moves": {"piece_tokens": args.piece_tokens, "seam_s": args.seam_s,
                  "piece_seam_s": args.piece_seam_s},
        "primary_variant": PRIMARY,
        "judged_variant": JUDGED,
        "live_wall_s": round(live_wall, 2),
        "loadavg_live_start": load0,
        "drift": round(drift, 4),
        "policies": per_policy,
        "checks": "every batch N groups x n responses, each exactly its forced length "
                  "(finish_reason length), no prompt delivered twice: passed",
        "machine_loadavg_end": loadavg(),
        "nproc": os.cpu_count(),
    }
    summarize_ordering(res)
    return res


async def natural_main(args: argparse.Namespace, endpoints: list[str], servers: str,
                       out: Path, specs: list[LaneSpec], policies: list[str], model: str,
                       max_len: int) -> dict[str, Any]:
    """``--natural``: every lane on the same shipped chat prompts with natural lengths; the
    simulator replays, per lane, the lengths that lane produced (``ProducedLengths``)."""
    n, groups, steps = args.group_size, args.groups, args.steps
    prompts = read_prompt_set(args.prompts).prompts[: groups * (steps + 2) * 2]
    prompt_ids = [p.prompt_id for p in prompts]
    bs = tuple(int(b) for b in args.batch_sizes.split(","))
    prof = dict(tokens=args.profile_tokens, repeats=args.profile_repeats,
                ttft_repeats=args.ttft_repeats, out_dir=out, prompt="What is 17 + 25?")
    log(f"natural lengths: model {model}, prompts {args.prompts}, max_tokens {args.max_tokens}; "
        f"policies {policies}; profiling all servers in lockstep")
    before = await measure(endpoints, model, bs, label="before", **prof)
    mean_path = out / "profile_mean_before.json"
    before.mean_model().save(mean_path)
    overrides = {k: v for k, v in (("q0", args.q0), ("m0", args.m0)) if v is not None}
    move_settings = MoveSettings(args.piece_tokens, args.seam_s)
    t0, load0 = time.perf_counter(), loadavg()
    live = await run_interleaved(specs, endpoints, model, None, prompts, groups, n, steps,
                                 str(mean_path), overrides, move_settings, None,
                                 max_tokens=args.max_tokens)
    live_wall = time.perf_counter() - t0
    log("profiling again after the live steps (profiling drift)")
    after = await measure(endpoints, model, bs, label="after", **prof)
    model_before = before.mean_model()
    pieces = PieceSettings(args.piece_tokens, args.piece_seam_s)
    per_policy: dict[str, Any] = {}
    for spec in specs:
        produced = ProducedLengths.of(live[spec.name], args.max_tokens)
        ctrl = lane_controller(spec, overrides, move_settings)
        closed = closed_loop_sim(spec.policy, sim_pools(model_before, before.prefill_s),
                                 model_before, produced, prompt_ids,  # type: ignore[arg-type]
                                 groups, n, len(endpoints), steps, ctrl, moves=spec.moves,
                                 pieces=pieces)
        per_policy[spec.name] = policy_result(live[spec.name], [before, after],
                                              produced,  # type: ignore[arg-type]
                                              n, closed, pieces if spec.moves else None)
        lens = [t for row in produced.lengths.values() for t in row]
        per_policy[spec.name]["natural_lengths"] = {
            "responses": len(lens), "mean": round(sum(lens) / max(len(lens), 1), 1),
            "max": max(lens, default=0),
            "at_cap": sum(1 for t in lens if t >= args.max_tokens)}
    res = {
        "what": "natural lengths (real model, EOS, chat prompts): live steps vs SimExecutor on "
                "the same plans replaying the lengths each lane produced",
        "natural": True,
        "command": command_line("benchmarks/bench_real_engine.py", sys.argv[1:]),
        "servers": servers, "endpoints": endpoints, "model": model, "max_model_len": max_len,
        "groups": groups, "group_size": n, "steps": steps, "policies_run": policies,
        "controller_overrides": overrides, "prompts": args.prompts,
        "max_tokens": args.max_tokens,
        "settings": {"batch_sizes": list(bs), "profile_tokens": args.profile_tokens,
                     "profile_repeats": args.profile_repeats,
                     "ttft_repeats": args.ttft_repeats},
        "length_scale": 1.0, "max_forced_tokens": args.max_tokens,
        "prompt_ids": prompt_ids,
        "profiles": {"before": before.summary(), "after": after.summary(), "between": [],
                     "controller_profile_file": mean_path.name},
        "profile_between": False, "profile_times": 2,
        "moves": {"piece_tokens": args.piece_tokens, "seam_s": args.seam_s,
                  "piece_seam_s": args.piece_seam_s},
        "primary_variant": PRIMARY, "judged_variant": JUDGED,
        "live_wall_s": round(live_wall, 2), "loadavg_live_start": load0,
        "drift": round(max(abs(d["drift_rel"]) for d in per_policy.values()), 4),
        "policies": per_policy,
        "checks": "every batch N groups x n responses, each ending in stop or length, no "
                  "prompt delivered twice: passed",
        "machine_loadavg_end": loadavg(), "nproc": os.cpu_count(),
    }
    summarize_ordering(res)
    return res


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        res = json.loads((out / "real_engine.json").read_text())
        summarize_ordering(res)
        (out / "real_engine.json").write_text(json.dumps(res, indent=2) + "\n")
        report.write(res, out / "real_engine.md")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    given = [u for u in args.endpoints.split(",") if u]
    with Servers(given, args.emulate, args.emulate_time_scale, out / "server-logs") as srv:
        res = asyncio.run(amain(args, srv.endpoints, srv.kind, out))
    (out / "real_engine.json").write_text(json.dumps(res, indent=2) + "\n")
    report.write(res, out / "real_engine.md")
    for pol, d in res["policies"].items():
        print(f"{pol}: live mean step {d['live_mean_step_s']:.3f} s, sim "
              f"{d['sim_mean_step_s'][JUDGED]:.3f} s, error "
              f"{d['mean_step_rel_err'][JUDGED]:+.1%}; total error "
              f"{d['total_rel_err'][JUDGED]:+.1%}")
    print(f"profiling drift {res['drift']:.1%}; ordering right where live differs by more: "
          f"{res['ordering_ok']}; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
