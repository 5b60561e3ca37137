"""Router overhead: the live runtime's own CPU time as a fraction of step wall time.

8 emulated replicas (subprocesses, so their CPU is not counted), steps of N = 256 groups x 8
(2,048 requests in flight), TailSieve through ``TailSieveRollout``. The router process's CPU
time (``time.process_time``) is measured around every step, and reported per request and per
generated token too (what carries over to other replica speeds).

The fraction depends on how fast the replicas are. The default runs them at the ``qwen3-4b-h100``
profile's speed (an H100-class replica serving a ~4B model, ``--time-scale 1``): steps of minutes (the old hand-drawn curve: ~145 s),
~8 min in all. ``--profile cpu --time-scale 0.25`` is the stress setting used before: replicas
~6x faster per request than that, ~41 s steps.

    .venv/bin/python benchmarks/bench_router.py --out benchmarks/results/router.json
    .venv/bin/python benchmarks/bench_router.py --profile cpu --time-scale 0.25 \
        --out benchmarks/results/router_stress.json

Cluster scale (``--cluster``): 64 replicas, N = 256 groups x 16 (4,096 requests in flight) from
one router process, replicas at the grounded ``qwen3-4b-h100`` profile (a ~295 s step at GPU
speed, so they run ``--time-scale 0.1`` faster and the share is reported both at the measured
speed and at GPU speed: router CPU per step over the step time divided by the time scale). The
64 emulated replicas live in ``--hosts`` processes (ports 8310..), not one process each.
Reports router CPU per request, the share, and the router's peak memory (max RSS)::

    .venv/bin/python benchmarks/bench_router.py --cluster --out benchmarks/results/router_cluster.json

With continuation (``--continuation --piece-tokens K``) each row also counts the pieces; with
``--rebalance`` (moves by the live rebalancer; ``--seam-s`` sets the controller's seam cost) it
counts the moves, the checks and the router CPU the checks took, with how long each slice of a
check held the event loop (CPU time: reading the loads, then each decision, planning and making
at most two moves) and each whole check, p50 / p99 per step. ``router_sys_cpu_s`` is the
part of the router's CPU spent in the kernel (sockets); ``gc_cpu_s`` and ``gc_pause_ms_max``
time the garbage collector's pauses; ``gc_collections`` counts the cyclic
garbage collector's runs per generation (young, middle, full) during the step.

The router runs on uvloop when it is installed (``pip install 'tailsieve[fast]'``), as the
runtime's entry points do; ``--loop asyncio`` measures asyncio's own loop. The result names
the loop it measured (``event_loop``)::

    .venv/bin/python benchmarks/bench_router.py --cluster --loop asyncio \
        --out benchmarks/results/router_cluster_asyncio.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import multiprocessing as mp
import os
import platform
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from outdir import default_out

from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.runtime.demo import StepLengths
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.emulator.config import EmulatorConfig
from tailsieve.runtime.emulator.protocol import text_ids
from tailsieve.runtime.emulator.server import EmulatorServer
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.engine.lean_http import LeanTransport
from tailsieve.runtime.engine.transport import AiohttpTransport
from tailsieve.runtime.event_loop import CHOICES as LOOP_CHOICES
from tailsieve.runtime.event_loop import loop_name
from tailsieve.runtime.event_loop import run as run_on_loop
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.workload import load_workload

_LOOP = [""]  # the router's event loop, as measured
_GC_PAUSES: list[float] = []  # CPU seconds of each garbage collection in the step
_GC_FREED: list[int] = []  # objects each collection found unreachable and freed


def _gc_timer() -> Any:
    """A ``gc.callbacks`` hook recording each collection's CPU time in ``_GC_PAUSES``."""
    began = [0.0]

    def hook(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.process_time()
        else:
            _GC_PAUSES.append(time.process_time() - began[0])
            _GC_FREED.append(info["collected"])

    return hook


def _ms(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds) in milliseconds (nearest rank; 0 if none)."""
    if not values:
        return 0.0
    v = sorted(values)
    return 1e3 * v[min(len(v) - 1, int(q * len(v)))]


async def run(
    args: argparse.Namespace, urls: list[str], profile_path: Path
) -> list[dict[str, float]]:
    wl = load_workload("paper-math", num_prompts=8 * args.groups * (args.steps + 2), seed=0)
    lengths = StepLengths(wl, args.group_size, 0)
    sglang = args.backend == "sglang"
    cfg = RolloutConfig(
        backend=args.backend,
        num_groups=args.groups,
        group_size=args.group_size,
        policy="tailsieve",
        model="tailsieve-emulated",
        sampling=SamplingParams(max_tokens=32768, temperature=0.7, seed=0),
        replay=lengths,
        profile=str(profile_path),
        split_groups=not args.one_request_per_group,
        return_token_ids=not args.counts_only,
        stream=args.stream,
        stream_interval=args.stream_interval,
        continuation=args.continuation or args.piece_tokens is not None,
        piece_tokens=args.piece_tokens,
        moves=args.rebalance,
        # moves on every step (no balance gate): the benchmark measures the router with moves
        controller=({"seam_s": args.seam_s} if args.seam_s is not None else {})
        | ({"gate": None} if args.rebalance else {}),
    )
    # SGLang does not echo a text prompt's ids (a continuation needs them): the ids the
    # emulator gives the same text
    prompts = iter(PromptInput(p, token_ids=text_ids(f"Solve {p}.")) if sglang else
                   PromptInput(p, text=f"Solve {p}.") for p in wl.prompt_ids())
    rows = []
    _LOOP[0] = loop_name()
    prof = cProfile.Profile(time.process_time) if args.cprofile else None
    transport = AiohttpTransport() if args.transport == "aiohttp" else LeanTransport()
    async with TailSieveRollout(urls, cfg, transport=transport) as ro:
        if args.gc_freeze:
            gc.freeze()  # what the process holds so far is never collected again
        for t in range(args.steps + 1):
            lengths.step = t
            batch_prompts = [next(prompts) for _ in range(ro.num_fresh_needed())]
            if prof is not None and t == args.steps:
                prof.enable()
            c0, w0 = time.process_time(), time.perf_counter()
            sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            gc0 = [g["collections"] for g in gc.get_stats()]
            _GC_PAUSES.clear()
            _GC_FREED.clear()
            if args.gc_between_steps:
                gc.disable()
            batch = await ro.step(batch_prompts)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            between_s = 0.0
            if args.gc_between_steps:  # the step's garbage, collected once it is over
                gc.enable()
                g0 = time.process_time()
                gc.collect()
                between_s = time.process_time() - g0
            sys_s = resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0
            if prof is not None and t == args.steps:
                prof.disable()
                stats = pstats.Stats(prof).sort_stats("tottime")
                stats.print_stats(25)
                stats.dump_stats(str(args.cprofile))
            n_req = batch.metrics.num_launched * (
                args.group_size if not args.one_request_per_group else 1
            )
            tokens = sum(r.num_tokens for g in batch.groups for r in g.responses)
            tally = ro.executor.last_moves
            rows.append(
                {
                    "step": t,
                    "wall_s": wall,
                    "router_cpu_s": cpu,
                    "router_sys_cpu_s": sys_s,  # of it, in the kernel (sockets, TCP)
                    "cpu_fraction": cpu / wall,
                    "num_requests": n_req,
                    "delivered_tokens": tokens,
                    "cpu_ms_per_request": 1e3 * cpu / max(1, n_req),
                    "cpu_us_per_delivered_token": 1e6 * cpu / max(1, tokens),
                    "num_pieces": sum(len(c.pieces) for cs in ro.executor.chains.values()
                                      for c in cs),
                    "num_moves": batch.metrics.num_moves,
                    "num_checks": ro.executor.last_moves.num_checks,
                    "rebalancer_cpu_s": sum(tally.check_cpu_s),
                    # how long each slice of a check holds the event loop, CPU milliseconds:
                    # reading the loads, then each decision (planning and making <= 2 moves)
                    "loads_cpu_ms_p50": _ms(tally.loads_cpu_s, 0.5),
                    "loads_cpu_ms_p99": _ms(tally.loads_cpu_s, 0.99),
                    "decision_cpu_ms_p50": _ms(tally.decision_cpu_s, 0.5),
                    "decision_cpu_ms_p99": _ms(tally.decision_cpu_s, 0.99),
                    "decision_cpu_ms_max": _ms(tally.decision_cpu_s, 1.0),
                    "check_cpu_ms_p50": _ms(tally.check_cpu_s, 0.5),
                    "check_cpu_ms_p99": _ms(tally.check_cpu_s, 0.99),
                    "gc_cpu_s": sum(_GC_PAUSES),  # the collector's pauses (CPU), in all
                    "gc_after_step_cpu_s": between_s,  # --gc-between-steps: collecting after
                    "gc_freed_objects": sum(_GC_FREED),  # unreachable cycles' objects it freed
                    "gc_tracked_objects": len(gc.get_objects()),  # what a full one traverses
                    "gc_pause_ms_max": _ms(_GC_PAUSES, 1.0),
                    "gc_collections": [g["collections"] - c for g, c in zip(gc.get_stats(), gc0,
                                                                            strict=True)],
                    "q": batch.metrics.q,
                    "m": batch.metrics.m,
                    "step_s_at_gpu_speed": wall / args.time_scale,
                    "cpu_fraction_at_gpu_speed": cpu / (wall / args.time_scale),
                    "router_max_rss_mb": _max_rss_mb(),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


async def run_timing_gc(
    args: argparse.Namespace, urls: list[str], profile_path: Path
) -> list[dict[str, float]]:
    """``run`` with the garbage collector's pauses timed."""
    hook = _gc_timer()
    gc.callbacks.append(hook)
    try:
        return await run(args, urls, profile_path)
    finally:
        gc.callbacks.remove(hook)


def simulated_step_s(args: argparse.Namespace) -> float:
    """Mean TailSieve step time of the simulator at the profile's (GPU) speed, same shape."""
    code = "import sys; from tailsieve.cli.main import main; sys.exit(main())"
    out = subprocess.run(
        [sys.executable, "-c", code, "simulate", "--replicas", str(args.replicas), "--groups",
         str(args.groups), "--group-size", str(args.group_size), "--steps", "4", "--policy",
         "tailsieve", "--profile", args.profile, "--json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    pol = next(p for p in json.loads(out)["policies"] if p["policy"] == "tailsieve")
    return float(pol["mean_step_s"])


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _host(ports: list[int], profile: str, time_scale: float, conn: Any) -> None:
    """Child process: emulated replicas on ``ports`` in one event loop until terminated."""

    async def serve() -> None:
        servers = []
        for port in ports:
            cfg = EmulatorConfig.from_profile(
                profile, time_scale=time_scale, max_num_seqs=4096, max_model_len=65536, seed=port
            )
            servers.append(EmulatorServer(cfg, "127.0.0.1", port))
            await servers[-1].start()
        conn.send([s.url for s in servers])
        await asyncio.Event().wait()

    asyncio.run(serve())


@contextlib.contextmanager
def hosted_replicas(n: int, hosts: int, base_port: int, profile: str, time_scale: float) -> Any:
    """``n`` emulated replicas spread over ``hosts`` processes (ports base_port..)."""
    ctx = mp.get_context("spawn")
    procs, urls = [], []
    try:
        for h in range(hosts):
            # base_port 0: every replica on a free port the system picks
            ports = [base_port + i if base_port else 0 for i in range(h, n, hosts)]
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_host, args=(ports, profile, time_scale, child), daemon=True)
            p.start()
            procs.append((p, parent))
        for p, parent in procs:
            if not parent.poll(120):
                raise RuntimeError(f"emulator host {p.pid} did not start")
            urls += parent.recv()
        yield sorted(urls, key=lambda u: int(u.rsplit(":", 1)[1]))
    finally:
        for p, _ in procs:
            p.terminate()
        for p, _ in procs:
            p.join(10)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2, help="steps after the warm-up step")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--one-request-per-group", action="store_true")
    ap.add_argument(
        "--counts-only",
        action="store_true",
        help="do not ask for per-response token ids (usage gives exact counts when split)",
    )
    ap.add_argument("--stream", action="store_true", help="streamed responses")
    ap.add_argument("--stream-interval", type=int, default=None,
                    help="with --stream (vLLM API): tokens per streamed chunk")
    ap.add_argument("--backend", choices=("vllm", "sglang"), default="vllm",
                    help="the API the router speaks (sglang: a move aborts the running request, "
                         "which returns its partial output; no pieces needed)")
    ap.add_argument("--continuation", action="store_true", help="responses as piece chains")
    ap.add_argument("--piece-tokens", type=int, default=None, help="continuation: piece cap")
    ap.add_argument("--rebalance", action="store_true",
                    help="continuation: live moves (the tailsieve policy's rebalancer)")
    ap.add_argument("--seam-s", type=float, default=None,
                    help="rebalance: cost of one move beyond its prefill (controller seam_s)")
    ap.add_argument("--out", type=Path, default=default_out("router.json"),
                    help="result JSON (default: under the system temp dir)")
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="64 replicas, 256 groups x 16, qwen3-4b-h100 at --time-scale 0.1, hosted replicas",
    )
    ap.add_argument("--hosts", type=int, default=0, help="host the replicas in K processes")
    ap.add_argument("--base-port", type=int, default=8310,
                    help="first port of hosted replicas (0: free ports)")
    ap.add_argument("--cprofile", type=Path, default=None, help="cProfile the last step")
    ap.add_argument("--gc-between-steps", action="store_true",
                    help="no garbage collection during a step; one full collection after it "
                         "(timed apart, gc_after_step_cpu_s)")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="gc.freeze() once the router is set up (what a trainer may do after "
                         "loading): the garbage collector no longer traverses those objects")
    ap.add_argument("--target", type=float, default=None, help="max share at GPU speed")
    ap.add_argument(
        "--transport", choices=("lean", "aiohttp"), default="lean",
        help="the router's HTTP client for completions (aiohttp: before issue 13)",
    )  # fmt: skip
    ap.add_argument(
        "--loop", choices=LOOP_CHOICES, default="auto",
        help="the router's event loop (auto: uvloop when installed; the replicas use asyncio's)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.rebalance and not (args.continuation or args.piece_tokens is not None):
        ap.error("--rebalance needs --continuation (moves continue a response elsewhere)")
    if args.cluster:
        defaults = {"replicas": 8, "groups": 256, "group_size": 8, "time_scale": 1.0,
                    "profile": DEFAULT_PROFILE, "hosts": 0, "steps": 2}  # fmt: skip
        preset = {"replicas": 64, "groups": 256, "group_size": 16, "time_scale": 0.1,
                  "profile": "qwen3-4b-h100", "hosts": 8, "steps": 2}  # fmt: skip
        for k, v in preset.items():
            if getattr(args, k) == defaults[k]:
                setattr(args, k, v)
        if args.target is None:
            args.target = 0.02
    args.out.parent.mkdir(parents=True, exist_ok=True)
    scaled = load_profile(args.profile).scaled(args.time_scale)
    profile_path = args.out.with_suffix(".profile.json")
    scaled.save(profile_path)
    if args.hosts > 0:
        with hosted_replicas(
            args.replicas, args.hosts, args.base_port, args.profile, args.time_scale
        ) as urls:
            rows = run_on_loop(run_timing_gc(args, urls, profile_path), args.loop)
    else:
        with EmulatorFleet.start(
            args.replicas,
            profile=args.profile,
            time_scale=args.time_scale,
            startup_timeout_s=180.0,
            max_model_len=65536,
            max_num_seqs=4096,
        ) as fleet:
            rows = run_on_loop(run_timing_gc(args, fleet.urls, profile_path), args.loop)
    profile_path.unlink(missing_ok=True)
    steady = rows[1:] or rows
    worst = max(r["cpu_fraction"] for r in steady)
    sim_step_s = simulated_step_s(args)
    for r in rows:
        r["cpu_fraction_vs_simulated_step"] = r["router_cpu_s"] / sim_step_s
    gpu_worst = max(
        max(r["cpu_fraction_at_gpu_speed"], r["cpu_fraction_vs_simulated_step"]) for r in steady
    )
    target = args.target if args.target is not None else 0.05
    judged = gpu_worst if args.target is not None else worst
    result = {
        "benchmark": "router_overhead",
        "replicas": args.replicas,
        "groups": args.groups,
        "group_size": args.group_size,
        "split_groups": not args.one_request_per_group,
        "time_scale": args.time_scale,
        "profile": args.profile,
        "return_token_ids": not args.counts_only,
        "transport": args.transport,
        "event_loop": _LOOP[0],
        "backend": args.backend,
        "stream": args.stream,
        "stream_interval": args.stream_interval,
        "gc_freeze": args.gc_freeze,
        "gc_between_steps": args.gc_between_steps,
        "continuation": args.continuation or args.piece_tokens is not None,
        "piece_tokens": args.piece_tokens,
        "rebalance": args.rebalance,
        "seam_s": args.seam_s,
        "moves_per_step_after_warmup": sum(r["num_moves"] for r in steady) / len(steady),
        "decision_cpu_ms_p99_after_warmup": max(r["decision_cpu_ms_p99"] for r in steady),
        "loads_cpu_ms_p99_after_warmup": max(r["loads_cpu_ms_p99"] for r in steady),
        "check_cpu_ms_p99_after_warmup": max(r["check_cpu_ms_p99"] for r in steady),
        "cpu_us_per_delivered_token_after_warmup": sum(
            r["cpu_us_per_delivered_token"] for r in steady
        ) / len(steady),
        "steps": rows,
        "max_cpu_fraction_after_warmup": worst,
        "mean_cpu_fraction_after_warmup": sum(r["cpu_fraction"] for r in steady) / len(steady),
        "simulated_step_s_at_profile_speed": sim_step_s,
        "max_cpu_fraction_at_gpu_speed": gpu_worst,
        "cpu_ms_per_request_after_warmup": sum(r["cpu_ms_per_request"] for r in steady)
        / len(steady),
        "router_max_rss_mb": _max_rss_mb(),
        "target_cpu_fraction": target,
        "judged_on": "at_gpu_speed" if args.target is not None else "measured",
        "pass": judged < target,
        "loadavg": os.getloadavg(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "steps"}, indent=1))


if __name__ == "__main__":
    main()
