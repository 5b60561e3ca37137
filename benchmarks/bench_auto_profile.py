"""Does the ``auto`` profile converge to the servers' decode curve, and how fast?

::

    PYTHONPATH=src:benchmarks python benchmarks/bench_auto_profile.py --emulate 2 \\
        --emulate-profile cpu --out benchmarks/results/auto_profile/emulated-cpu

1. Servers: ``--endpoints URL,URL`` uses running servers (e.g. the vLLM CPU servers);
   otherwise ``--emulate R`` emulated replicas of ``--emulate-profile`` at
   ``--emulate-time-scale`` (their truth: that profile, scaled).
2. Reference: ``tailsieve profile`` on the servers (lockstep rounds at ``--batch-sizes`` and,
   with ``--context-lengths``, the context term), averaged over the replicas; with
   ``--profile-after`` measured again after the rollout and averaged (on a shared machine the
   servers' speed drifts; the difference of the two is reported).
3. Live: ``--steps`` steps of ``TailSieveRollout`` with the default ``profile="auto"`` (or
   ``--fallback NAME``: ``auto:NAME``) and the default moves, on forced lengths from the
   shipped AIME trace (replay mode). The model in use after the probe (or at the start) and
   after every step is compared with the reference (and with the truth on emulated servers):

   - ``err_ran``: relative error of the step time ``tau(b) + k * C`` at the batch and context
     the next step actually ran at (out of sample; the last model: its own step's), weighted
     by the tokens generated there (the replicas' stretches as the router's bookkeeping saw
     them);
   - ``err_grid``: relative error of ``tau(b)`` at zero context on the grid ``--batch-sizes``
     (max and mean over the grid).

Written to ``--out``: ``auto_profile.json`` (per step: pieces observed, whether the fit was in
use, both errors against each reference, the fitted tau on the grid and k) and
``auto_profile.md`` (the table for docs/performance-model.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from outdir import default_out
from real_engine.servers import log, served_model

from tailsieve.model.decode_observations import PieceObservation
from tailsieve.model.profiles import load_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.profile_fit import mean_profile
from tailsieve.runtime.profiler import ProfileSettings, profile_endpoints
from tailsieve.runtime.step.replay import ReplayLengths
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.workload.presets import AIME_TRACE_IN_REPO


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=default_out("auto_profile"))
    p.add_argument("--endpoints", default="", help="comma-separated running servers")
    p.add_argument("--emulate", type=int, default=2, help="emulated replicas (no --endpoints)")
    p.add_argument("--emulate-profile", default="cpu")
    p.add_argument("--emulate-time-scale", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-response-tokens", type=int, default=600)
    p.add_argument("--fallback", default=None, help="auto:NAME instead of the probe")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="the rollout's sampling (tailsieve profile decodes greedily)")
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32")
    p.add_argument("--profile-tokens", type=int, default=200)
    p.add_argument("--context-lengths", default="", help="e.g. 256,768: the profiler's k sweep")
    p.add_argument("--context-batch", type=int, default=8)
    p.add_argument("--profile-after", action="store_true",
                   help="profile again after the rollout; the reference is the mean of both")
    p.add_argument("--trace", default=str(AIME_TRACE_IN_REPO))
    return p.parse_args(argv)


def err_ran(model: ThroughputModel, ref: ThroughputModel,
            obs: tuple[PieceObservation, ...]) -> float | None:
    """Token-weighted relative error of the step time at the (b, C) the pieces ran at."""
    if not obs:
        return None
    b = np.concatenate([np.asarray(o.batch) for o in obs])
    c = np.concatenate([np.asarray(o.context_tokens) for o in obs])
    d = np.concatenate([np.asarray(o.durations_s) for o in obs])
    truth = ref.tau_array(b) + ref.context_s_per_token * c
    fit = model.tau_array(b) + model.context_s_per_token * c
    return float(np.average(np.abs(fit - truth) / truth, weights=d / truth))


def err_grid(model: ThroughputModel, ref: ThroughputModel, grid: list[int]) -> dict[str, float]:
    e = [abs(model.tau(b) - ref.tau(b)) / ref.tau(b) for b in grid]
    return {"max": round(max(e), 4), "mean": round(float(np.mean(e)), 4)}


def compare(model: ThroughputModel, refs: dict[str, ThroughputModel], grid: list[int],
            obs: tuple[PieceObservation, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, ref in refs.items():
        ran = err_ran(model, ref, obs)
        out[name] = {"err_ran": None if ran is None else round(ran, 4),
                     "err_grid": err_grid(model, ref, grid)}
    return out


async def reference(endpoints: list[str], args: argparse.Namespace,
                    grid: list[int]) -> ThroughputModel:
    ctx = tuple(int(x) for x in args.context_lengths.split(",") if x)
    settings = [ProfileSettings(u, batch_sizes=tuple(grid), tokens=args.profile_tokens,
                                context_lengths=ctx, context_batch=args.context_batch)
                for u in endpoints]
    return mean_profile(await profile_endpoints(settings), "tailsieve-profile")


async def amain(args: argparse.Namespace, endpoints: list[str], kind: str,
                truth: ThroughputModel | None) -> dict[str, Any]:
    model, max_len = await served_model(endpoints[0])
    grid = [int(b) for b in args.batch_sizes.split(",")]
    log(f"tailsieve profile on {len(endpoints)} servers ({kind})")
    t0 = time.perf_counter()
    prof = await reference(endpoints, args, grid)
    prof_s = time.perf_counter() - t0
    refs = {"profile": prof, **({"truth": truth} if truth is not None else {})}
    raw = ReplayLengths.from_file(args.trace)
    budget = min(max_len - 32, args.max_response_tokens)
    scale = budget / max(max(v) for v in raw.lengths.values())
    lengths = ReplayLengths(raw.lengths, length_scale=scale, min_tokens=1, max_tokens=budget)
    ids = list(raw.lengths)
    spec = "auto" if args.fallback is None else f"auto:{args.fallback}"
    cfg = RolloutConfig(num_groups=args.groups, group_size=args.group_size, model=model,
                        sampling=SamplingParams(max_tokens=budget, temperature=args.temperature),
                        replay=lengths, profile=spec)
    rows: list[dict[str, Any]] = []
    models: list[ThroughputModel] = []
    ran: list[tuple[PieceObservation, ...]] = []  # the pieces each step timed
    t0 = time.perf_counter()
    async with TailSieveRollout(endpoints, cfg) as ro:
        start_s = time.perf_counter() - t0  # health, model, and the probe (auto)
        online = ro.live.online
        assert online is not None
        rows.append(_row("probe" if args.fallback is None else "start", 0.0, ro, online, grid))
        models.append(ro.profile)
        used = 0
        for _ in range(args.steps):
            need = ro.num_fresh_needed()
            prompts = [PromptInput(pid, text=pid) for pid in ids[used:used + need]]
            used += need
            seen = online.num_seen
            batch = await ro.step(prompts)
            new = min(online.num_seen - seen, online.num_observations)
            ran.append(online.observations[-new:] if new else ())
            rows.append(_row(f"step {batch.step}", batch.metrics.makespan_s, ro, online, grid))
            models.append(ro.profile)
    drift = None
    if args.profile_after:  # the servers' speed drifts on a shared machine: bracket the run
        log("tailsieve profile again, after the rollout")
        after = await reference(endpoints, args, grid)
        drift = compare(prof, {"after": after}, grid, ran[-1] if ran else ())["after"]
        refs["profile"] = _mean(prof, after, grid)
    # each model against the pieces of the step it priced next (out of sample); the last
    # one against the last step's
    for i, (row, m) in enumerate(zip(rows, models, strict=True)):
        row["errors"] = compare(m, refs, grid, ran[min(i, len(ran) - 1)] if ran else ())
        log(f"{row['label']}: {json.dumps(row['errors'])}")
    fitted = ro.profile
    return {
        "what": "the auto profile (fitted online from the rollout's own timings) against "
                "tailsieve profile" + (" and the emulated truth" if truth else ""),
        "command": "python benchmarks/bench_auto_profile.py " + shlex.join(sys.argv[1:]),
        "servers": kind, "endpoints": endpoints, "model": model, "groups": args.groups,
        "group_size": args.group_size, "steps": args.steps, "profile": spec,
        "max_forced_tokens": budget, "nproc": os.cpu_count(), "grid": grid,
        "profile_seconds": round(prof_s, 1), "start_seconds": round(start_s, 2),
        "references": {k: _curve(v, grid) for k, v in refs.items()},
        "fitted": _curve(fitted, grid), "steps_detail": rows,
        "profile_vs_truth": None if truth is None else compare(
            prof, {"truth": truth}, grid, ran[-1] if ran else ())["truth"],
        "converged": _converged(rows),
        "profile_before_vs_after": drift,
    }


def _mean(a: ThroughputModel, b: ThroughputModel, grid: list[int]) -> ThroughputModel:
    """The mean of two measured curves on the grid (running maximum), and their mean k."""
    top, pairs = 0.0, []
    for x in grid:
        top = max(top, (a.tau(x) + b.tau(x)) / 2)
        pairs.append((x, top))
    return ThroughputModel.from_pairs(pairs, name="tailsieve-profile (before and after)",
                                      ).with_context((a.context_s_per_token
                                                      + b.context_s_per_token) / 2)


def _row(label: str, makespan_s: float, ro: TailSieveRollout, online: Any,
         grid: list[int]) -> dict[str, Any]:
    q = online.quality
    return {
        "label": label, "makespan_s": round(makespan_s, 3), "pieces": online.num_seen,
        "fit_in_use": online.ready, "fit_error": None if q is None else round(q.rel_rmse, 4),
        "reason": None if q is None else q.reason,
        "overhead_s": ro.profile.provenance.get("overhead_s"),
        "tau_ms": [round(ro.profile.tau(b) * 1e3, 4) for b in grid],
        "k_ns_per_token": round(ro.profile.context_s_per_token * 1e9, 3),
    }


def _curve(m: ThroughputModel, grid: list[int]) -> dict[str, Any]:
    return {"name": m.name, "tau_ms": [round(m.tau(b) * 1e3, 4) for b in grid],
            "k_ns_per_token": round(m.context_s_per_token * 1e9, 3)}


def _converged(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """First row from which err_ran against each reference stays within 10%."""
    out: dict[str, Any] = {}
    refs = rows[0]["errors"].keys() if rows else ()
    for name in refs:
        vals = [r["errors"][name]["err_ran"] for r in rows]
        first = None
        for i in range(len(vals)):
            if all(v is not None and v <= 0.10 for v in vals[i:] if v is not None) and \
                    vals[i] is not None:
                first = i
                break
        out[name] = None if first is None else {"row": rows[first]["label"],
                                                "pieces": rows[first]["pieces"]}
    return out


def write_md(res: dict[str, Any], path: Path) -> None:
    refs = list(res["references"])
    head = " | ".join(f"err_ran vs {r} | err_grid max vs {r}" for r in refs)
    lines = [
        "# The auto profile against tailsieve profile", "",
        f"`{res['command']}`", "",
        f"Servers: {res['servers']} ({len(res['endpoints'])}), model `{res['model']}`, "
        f"N={res['groups']} x n={res['group_size']}, forced lengths <= "
        f"{res['max_forced_tokens']} tokens, profile `{res['profile']}`; grid b = "
        f"{', '.join(map(str, res['grid']))}. `tailsieve profile` took "
        f"{res['profile_seconds']} s; the rollout's start (with the probe) "
        f"{res['start_seconds']} s.", "",
        f"| after | pieces | fit in use | fit error | {head} |",
        "|---|---:|---|---:|" + "---:|---:|" * len(refs),
    ]
    for r in res["steps_detail"]:
        cells = " | ".join(f"{_pct(r['errors'][k]['err_ran'])} | "
                           f"{_pct(r['errors'][k]['err_grid']['max'])}" for k in refs)
        lines.append(f"| {r['label']} | {r['pieces']} | {'yes' if r['fit_in_use'] else 'no'} | "
                     f"{_pct(r['fit_error'])} | {cells} |")
    lines += ["", "| curve | " + " | ".join(f"tau({b}) ms" for b in res["grid"]) + " | k ns |",
              "|---|" + "---:|" * (len(res["grid"]) + 1)]
    for name, c in [*res["references"].items(), ("auto (fitted)", res["fitted"])]:
        lines.append(f"| {name} | " + " | ".join(f"{t:.3f}" for t in c["tau_ms"])
                     + f" | {c['k_ns_per_token']:.2f} |")
    lines += ["", f"Converged (err_ran within 10% from then on): {json.dumps(res['converged'])}"]
    drift = res.get("profile_before_vs_after")
    if drift:
        lines.append(f"`tailsieve profile` before against after the rollout (the reference is "
                     f"their mean): err_ran {_pct(drift['err_ran'])}, err_grid max "
                     f"{_pct(drift['err_grid']['max'])}.")
    pvt = res.get("profile_vs_truth")
    if pvt:
        lines.append(f"`tailsieve profile` against the truth: err_ran {_pct(pvt['err_ran'])} "
                     f"(the last step's points), err_grid max {_pct(pvt['err_grid']['max'])}.")
    path.write_text("\n".join(lines) + "\n")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    given = [u for u in args.endpoints.split(",") if u]
    if given:
        res = asyncio.run(amain(args, given, "running servers (--endpoints)", None))
    else:
        truth = load_profile(args.emulate_profile).scaled(args.emulate_time_scale, name="truth")
        log(f"starting {args.emulate} emulated replicas ({args.emulate_profile} x "
            f"{args.emulate_time_scale})")
        with EmulatorFleet.start(args.emulate, profile=args.emulate_profile,
                                 time_scale=args.emulate_time_scale,
                                 log_dir=default_out("auto_profile-server-logs")) as fleet:
            res = asyncio.run(amain(args, fleet.urls, f"emulated ({args.emulate_profile})",
                                    truth))
    (args.out / "auto_profile.json").write_text(json.dumps(res, indent=2) + "\n")
    write_md(res, args.out / "auto_profile.md")
    print(f"converged: {json.dumps(res['converged'])}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
