"""Live, side by side: ``tailsieve serve`` against the routers users pick instead.

Every router (``live_routers``: ``tailsieve serve``, round-robin, smg 1.13.0 under
``cache_aware`` and ``consistent_hashing``, vllm-router 0.1.17 under ``cache_aware`` and
``sticky_least_loaded``) is put in front of the SAME three emulated vLLM replicas
(qwen3-4b-h100 profile, time-scaled) and sent the same requests (``live_workloads``), one
router at a time, interleaved: each repeat runs every router once, the order rotated from
repeat to repeat (ABC BCA CAB ...). Each router is its own process, started once per scenario
and kept up across its repeats, as a router stays up across training steps (``--warmup``
rounds run first and are left out of the summary: the steady state of a router that has
served earlier steps); session keys are unique to a run. Scenarios: ``single`` and
``agentic``, each also with one replica ``--slowdown`` times slower (``*-straggler``). The
figures: wall time per router per scenario (mean, 95% CI over repeats), tokens served per
replica (the emulators' ``vllm:generation_tokens`` counters), each router process's CPU
seconds per run, ``tailsieve serve``'s turns, pieces and moves per run (its ``/metrics``), and
TailSieve's ratio to the best of the others (the router of least mean wall), paired per
repeat (its ablations, ``tailsieve-*``, are never "others"). ``--timeline`` keeps every
request's send and answer times. The external routers come from
``scripts/setup_routers.sh`` (their own venv, ``--routers-venv``); a router that is not
installed is skipped with the reason, written into the result. Everything binds 127.0.0.1::

    bash scripts/setup_routers.sh
    .venv/bin/python benchmarks/bench_routers_live.py --out benchmarks/results/routers_live
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from live_routers import DEFAULT_VENV, KNOWN, ROUTERS, RouterProcess, RouterSpec, missing_reason
from live_workloads import MODEL, Agentic, Client, SingleTurn, make_agentic, make_single
from outdir import command_line, default_out

from tailsieve.model.profiles import load_profile
from tailsieve.runtime.emulator import EmulatorFleet

SCENARIOS = ("single", "agentic", "single-straggler", "agentic-straggler")
COUNTER = re.compile(r"^vllm:generation_tokens(?:_total)?(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.M)
PROXY_COUNTERS = {  # tailsieve serve's /metrics read around each of its runs
    "turns": re.compile(r"^tailsieve_session_turns_total ([0-9.eE+-]+)$", re.M),
    "pieces": re.compile(r"^tailsieve_session_pieces_total ([0-9.eE+-]+)$", re.M),
    "moves": re.compile(r'^tailsieve_session_moves_total\{kind="mid_turn"\} ([0-9.eE+-]+)$', re.M),
    "boundary_moves": re.compile(r'^tailsieve_session_moves_total\{kind="boundary"\} '
                                 r"([0-9.eE+-]+)$", re.M),
}
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262}  # Student t, two-sided 95%, by degrees of freedom


def generated_tokens(url: str) -> float:
    """A replica's ``vllm:generation_tokens`` counter."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        m = COUNTER.search(r.read().decode())
    if m is None:
        raise RuntimeError(f"{url}/metrics has no vllm:generation_tokens")
    return float(m.group(1))


def proxy_counts(router: RouterProcess) -> dict[str, float]:
    """``tailsieve serve``'s turns, pieces and moves so far (empty for the other routers)."""
    if router.spec.family != "tailsieve":
        return {}
    with urllib.request.urlopen(router.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return {k: float(m.group(1)) for k, rx in PROXY_COUNTERS.items()
            if (m := rx.search(text)) is not None}


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mean_ci(xs: list[float]) -> dict[str, float]:
    """Mean and the half-width of its 95% t interval (0 for one sample)."""
    a = np.asarray(xs, dtype=float)
    half = 0.0
    if len(a) > 1:
        half = T95.get(len(a) - 1, 1.96) * float(a.std(ddof=1)) / np.sqrt(len(a))
    return {"mean": float(a.mean()), "ci95": half, "n": len(a)}


async def run_once(router: RouterProcess, urls: list[str], work: SingleTurn | Agentic,
                   id_base: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run of ``work`` through ``router``: its wall time and the tokens each replica made."""
    before = [generated_tokens(u) for u in urls]
    counts = proxy_counts(router)
    cpu0 = cpu_s(router.proc.pid)
    timeout = aiohttp.ClientTimeout(total=args.run_timeout_s)
    async with aiohttp.ClientSession(timeout=timeout,
                                     connector=aiohttp.TCPConnector(limit=0)) as http:
        client = Client(http, router.url, id_base, args.time_scale)
        wall = await (client.single(work) if isinstance(work, SingleTurn)
                      else client.agentic(work))
    cpu = cpu_s(router.proc.pid) - cpu0
    after = [generated_tokens(u) for u in urls]
    if router.proc.poll() is not None:
        raise RuntimeError(f"{router.spec.name} exited during the run: {router.log_tail()}")
    per_replica = [round(b - a) for a, b in zip(before, after, strict=True)]
    row: dict[str, Any] = {"router": router.spec.name, "wall_s": wall,
                           "tokens_per_replica": per_replica, "tokens_client": client.num_tokens,
                           "router_cpu_s": round(cpu, 3)}
    if args.timeline:
        row["timeline"] = [(round(a, 4), round(b, 4), n) for a, b, n in client.timeline]
    if counts:
        row["proxy"] = {k: round(v - counts.get(k, 0.0)) for k, v in proxy_counts(router).items()}
    return row


def workload(scenario: str, rng: np.random.Generator,
             args: argparse.Namespace) -> SingleTurn | Agentic:
    if scenario.startswith("single"):
        return make_single(rng, args.requests, args.group_size, args.median_tokens,
                           args.sigma, args.max_tokens)
    return make_agentic(rng, args.sessions, args.group_size, (args.min_turns, args.max_turns),
                        args.turn_median_tokens, args.sigma, args.max_tokens, args.tool_s)


async def run_scenario(scenario: str, specs: list[RouterSpec], profile: Path,
                       args: argparse.Namespace, log_dir: Path) -> list[dict[str, Any]]:
    work = workload(scenario, np.random.default_rng([args.seed, SCENARIOS.index(scenario)]),
                    args)
    slow = scenario.endswith("straggler")
    overrides: list[dict[str, object]] = [{} for _ in range(args.replicas - 1)]
    overrides = [*overrides, {"slowdown": args.slowdown}] if slow else []  # the last is slow
    rows: list[dict[str, Any]] = []
    with EmulatorFleet.start(args.replicas, profile=args.profile, time_scale=args.time_scale,
                             overrides=overrides, max_model_len=65536, max_num_seqs=256,
                             log_dir=log_dir / f"emulators-{scenario}") as fleet, \
            contextlib.ExitStack() as routers:
        started = [routers.enter_context(RouterProcess(
            spec, fleet.urls, args.routers_venv, str(profile),
            log_dir / f"{scenario}-{spec.name}.log", MODEL, args.time_scale)) for spec in specs]
        for rep in range(-args.warmup, args.repeats):  # warm-up rounds: repeat < 0
            k = (rep + args.warmup) % len(started)  # ABC BCA CAB ...: every router once per repeat, each
            for router in started[k:] + started[:k]:  # place in the order in turn
                row = await run_once(router, fleet.urls, work, 1 + len(rows), args)
                row.update(scenario=scenario, repeat=rep)
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]], target: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        mine = [r for r in rows if r["scenario"] == scenario and r["repeat"] >= 0]
        names = list(dict.fromkeys(r["router"] for r in mine))
        walls = {n: [r["wall_s"] for r in mine if r["router"] == n] for n in names}
        tokens = {n: np.mean([r["tokens_per_replica"] for r in mine if r["router"] == n],
                             axis=0) for n in names}
        cell: dict[str, Any] = {"routers": {n: {
            "wall_s": mean_ci(walls[n]),
            "router_cpu_s": round(float(np.mean([r["router_cpu_s"] for r in mine
                                                 if r["router"] == n])), 3),
            **({"proxy": {k: round(float(np.mean([r["proxy"].get(k, 0) for r in mine
                                                   if r["router"] == n])), 1)
                          for k in PROXY_COUNTERS}}
               if all("proxy" in r for r in mine if r["router"] == n) else {}),
            "tokens_per_replica": [round(float(t)) for t in tokens[n]],
            "token_share_per_replica": [round(float(t / tokens[n].sum()), 3)
                                        for t in tokens[n]]} for n in names}}
        others = [n for n in names if not n.startswith("tailsieve")]  # not its ablations
        if "tailsieve" in names and others:
            best = min(others, key=lambda n: float(np.mean(walls[n])))
            ratios = [o / t for o, t in zip(walls[best], walls["tailsieve"], strict=True)]
            ahead = {n: float(np.mean(walls[n]) / np.mean(walls["tailsieve"])) for n in others}
            need = target if scenario.endswith("straggler") else 1.0
            cell.update(best_other=best, ratio_to_best=mean_ci(ratios),
                        ratio_to_each=ahead, target_ratio=need,
                        target_met=min(ahead.values()) >= need and min(ahead.values()) > 1.0)
        out[scenario] = cell
    return out


def markdown(summ: dict[str, Any], slowdown: float) -> str:
    """The summary as one table per scenario (BENCHMARKS.md, docs/routers-live.md)."""
    lines = []
    for scenario, cell in summ.items():
        lines += [f"**{scenario}**" + (f" (replica 3 is {slowdown:g}x slower)"
                                       if scenario.endswith("straggler") else ""), "",
                  "| router | wall time (95% CI) | its wall / TailSieve's | tokens per replica "
                  "(share) | router CPU per run | pieces / turns (moves) |",
                  "|---|---|---|---|---|---|"]
        ts = cell["routers"].get("tailsieve", {}).get("wall_s", {}).get("mean")
        for name, r in cell["routers"].items():
            w = r["wall_s"]
            vs = f"{w['mean'] / ts:.2f}x" if ts else ""
            share = " / ".join(f"{t / 1000:.1f}k ({s:.0%})" for t, s in
                               zip(r["tokens_per_replica"], r["token_share_per_replica"],
                                   strict=True))
            px = r.get("proxy")
            pieces = (f"{px['pieces']:.0f} / {px['turns']:.0f} ({px['moves']:.0f})"
                      if px else "")
            lines.append(f"| {name} | {w['mean']:.2f} s ± {w['ci95']:.2f} | {vs} | {share} | "
                         f"{r['router_cpu_s']:.2f} s | {pieces} |")
        if "ratio_to_best" in cell:
            rb = cell["ratio_to_best"]
            lines += ["", f"TailSieve against the best other ({cell['best_other']}): "
                      f"**{rb['mean']:.2f}x** ± {rb['ci95']:.2f} (paired per repeat; target "
                      f">= {cell['target_ratio']:g}x and ahead of each: "
                      f"{'met' if cell['target_met'] else 'not met'})."]
        lines.append("")
    return "\n".join(lines)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routers", nargs="+", choices=KNOWN, default=list(ROUTERS))
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=0,
                    help="rounds per scenario run first and left out of the summary (every "
                    "router once each, as a router that has served earlier steps)")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--slowdown", type=float, default=3.0, help="the straggler's")
    ap.add_argument("--requests", type=int, default=256, help="single-turn requests")
    ap.add_argument("--sessions", type=int, default=24, help="agentic sessions")
    ap.add_argument("--group-size", type=int, default=8, help="GRPO group size")
    ap.add_argument("--min-turns", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--median-tokens", type=float, default=256.0, help="single-turn output")
    ap.add_argument("--turn-median-tokens", type=float, default=192.0, help="a turn's output")
    ap.add_argument("--sigma", type=float, default=0.8, help="lognormal sigma of lengths")
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--tool-s", type=float, default=1.0, help="median tool wait, model s")
    ap.add_argument("--time-scale", type=float, default=0.3,
                    help="real seconds per model second (the emulators and tailsieve's timers)")
    ap.add_argument("--profile", default="qwen3-4b-h100")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=1.2,
                    help="min ratio to the best other router with the straggler")
    ap.add_argument("--timeline", action="store_true",
                    help="keep every request's send and answer time in the runs")
    ap.add_argument("--run-timeout-s", type=float, default=900.0)
    ap.add_argument("--routers-venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--out", type=Path, default=default_out("routers_live"),
                    help="result folder (default: under the system temp dir)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # stop the routers and emulators too
    args.out.mkdir(parents=True, exist_ok=True)
    log_dir = Path(tempfile.mkdtemp(prefix="tailsieve-routers-live-"))  # kept on a failure
    specs, skipped = [], {}
    for name in args.routers:
        spec = RouterSpec.parse(name)
        why = missing_reason(spec, args.routers_venv)
        if why is None:
            specs.append(spec)
        else:
            skipped[name] = why
            print(f"skipping {name}: {why}", file=sys.stderr, flush=True)
    profile = log_dir / f"{args.profile}-x{args.time_scale:g}.json"
    load_profile(args.profile).scaled(args.time_scale).save(profile)
    rows: list[dict[str, Any]] = []
    for scenario in args.scenarios:
        rows += asyncio.run(run_scenario(scenario, specs, profile, args, log_dir))
    result = {
        "benchmark": "routers_live", "routers": [s.name for s in specs], "skipped": skipped,
        "replicas": args.replicas, "slowdown": args.slowdown, "repeats": args.repeats,
        "warmup": args.warmup,
        "requests": args.requests, "sessions": args.sessions, "group_size": args.group_size,
        "turns": [args.min_turns, args.max_turns], "time_scale": args.time_scale,
        "profile": args.profile, "target": args.target,
        "summary": summary(rows, args.target), "runs": rows,
        "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
        "command": command_line("benchmarks/bench_routers_live.py",
                                argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    (args.out / "routers_live.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "routers_live.md").write_text(markdown(result["summary"], args.slowdown))
    shutil.rmtree(log_dir, ignore_errors=True)
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
