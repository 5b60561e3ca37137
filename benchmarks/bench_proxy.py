"""Proxy overhead: ``tailsieve serve``'s own CPU time as a fraction of step wall time, measured
the way ``bench_router.py`` measures the router's.

Emulated vLLM replicas run in subprocesses (their CPU is not counted); the proxy
(``RoutingProxy``, the code ``tailsieve serve`` runs) runs in this process; the clients run in
another process and send each step's ``groups x group_size`` requests at once, one request per
sample with its own ``X-Session-ID`` (as slime sends one ``/generate`` per sample with its
routing key), prompts as token ids, forced lengths (``ignore_eos``, ``max_tokens`` from the
``paper-math`` workload, the lengths ``bench_router.py`` replays). The proxy process's CPU time
(``time.process_time``) is measured around every step and reported per request and per
delivered token too. Each step is also run with the same lengths straight to the replicas
(request ``k`` to replica ``k mod R``: per-request round-robin, what a client without a router
does), so ``wall_ratio_vs_direct`` is the step time through the proxy over the step time
without it (below 1: the proxy's moves balanced the step better than round-robin).

The default runs the replicas at the ``qwen3-4b-h100`` profile's speed (8 replicas, 256 x 8,
~2.5 min steps, two measured after a warm-up, each also run direct: ~15 min). A smaller,
faster run::

    .venv/bin/python benchmarks/bench_proxy.py --groups 64 --profile cpu --time-scale 0.25 \
        --out benchmarks/results/proxy/proxy_stress.json
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import multiprocessing as mp
import os
import platform
import pstats
import resource
import sys
import time
from pathlib import Path
from typing import Any

from outdir import default_out

from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.runtime.demo import StepLengths
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.event_loop import CHOICES as LOOP_CHOICES
from tailsieve.runtime.event_loop import loop_name
from tailsieve.runtime.event_loop import run as run_on_loop
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy
from tailsieve.runtime.sessions import GatewayConfig
from tailsieve.workload import load_workload

MODEL = "tailsieve-emulated"
PROMPT_TOKENS = 128

Request = tuple[str, list[int], int]  # session key, prompt ids, forced length


def _client(conn: Any) -> None:
    """Child process: runs each step it is sent (all requests at once) and answers
    (wall seconds, delivered tokens, failures)."""
    import aiohttp

    async def step(urls: list[str], reqs: list[Request]) -> tuple[float, int, list[str]]:
        conn_ = aiohttp.TCPConnector(limit=0, force_close=True)
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(connector=conn_, timeout=timeout) as s:
            async def one(k: int, key: str, ids: list[int], n: int) -> tuple[int, str]:
                body = {"model": MODEL, "prompt": ids, "max_tokens": n, "ignore_eos": True,
                        "temperature": 1.0, "return_token_ids": True}
                url = urls[k % len(urls)] + "/v1/completions"
                async with s.post(url, json=body, headers={"X-Session-ID": key}) as r:
                    text = await r.text()
                    if r.status != 200:
                        return 0, f"HTTP {r.status}: {text[:200]}"
                    got = len(json.loads(text)["choices"][0]["token_ids"])
                    return got, "" if got == n else f"{key}: {got} tokens, asked {n}"

            t0 = time.perf_counter()
            outs = await asyncio.gather(*(one(k, *r) for k, r in enumerate(reqs)))
            wall = time.perf_counter() - t0
        return wall, sum(o[0] for o in outs), [o[1] for o in outs if o[1]]

    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(asyncio.run(step(*msg)))


def step_requests(wl: Any, lengths: StepLengths, args: argparse.Namespace, t: int,
                  ) -> list[Request]:
    lengths.step = t
    pids = wl.prompt_ids()[t * args.groups:(t + 1) * args.groups]
    out = []
    for g, pid in enumerate(pids):
        base = 1000 + (t * args.groups + g) * 7 % 40000
        ids = list(range(base, base + PROMPT_TOKENS))
        out += [(f"{pid}/{i}", ids, lengths(pid, i)) for i in range(args.group_size)]
    return out


async def _ask(conn: Any, proc: Any, msg: Any) -> Any:
    """Send ``msg`` to the client process and wait for its answer (an error if it died)."""
    conn.send(msg)
    while not await asyncio.to_thread(conn.poll, 1.0):
        if not proc.is_alive():
            raise RuntimeError(f"the client process died (exit code {proc.exitcode})")
    return conn.recv()


async def run(args: argparse.Namespace, urls: list[str], profile_path: Path,
              ) -> tuple[list[dict[str, Any]], str]:
    wl = load_workload("paper-math", num_prompts=args.groups * (args.steps + 2), seed=0)
    lengths = StepLengths(wl, args.group_size, 0)
    gw = GatewayConfig(profile=str(profile_path), piece_tokens=args.piece_tokens,
                       moves=not args.no_moves)
    cfg = ProxyConfig(endpoints=tuple(urls), model=MODEL, gateway=gw)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_client, args=(child,), daemon=True)
    proc.start()
    rows: list[dict[str, Any]] = []
    prof = cProfile.Profile(time.process_time) if args.cprofile else None
    try:
        async with RoutingProxy(cfg) as proxy:
            url = await proxy.start("127.0.0.1", 0)
            gateway = proxy.gateway
            assert gateway is not None
            for t in range(args.steps + 1):
                reqs = step_requests(wl, lengths, args, t)
                direct_s = None
                if not args.no_direct:
                    direct_s, _, bad = await _ask(parent, proc, (urls, reqs))
                    if bad:
                        raise RuntimeError(f"direct step {t}: {bad[:3]}")
                before = gateway.stats()
                c0, w0 = time.process_time(), time.perf_counter()
                sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
                if prof is not None and t == args.steps:
                    prof.enable()
                wall, tokens, bad = await _ask(parent, proc, ([url], reqs))
                if prof is not None and t == args.steps:
                    prof.disable()
                cpu = time.process_time() - c0
                sys_s = resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0
                step_wall = time.perf_counter() - w0
                if bad:
                    raise RuntimeError(f"proxy step {t}: {bad[:3]}")
                st = gateway.stats()
                n = len(reqs)
                rows.append({
                    "step": t, "wall_s": wall, "proxy_cpu_s": cpu, "proxy_sys_cpu_s": sys_s,
                    "cpu_fraction": cpu / step_wall, "num_requests": n,
                    "delivered_tokens": tokens, "cpu_ms_per_request": 1e3 * cpu / n,
                    "cpu_us_per_delivered_token": 1e6 * cpu / max(1, tokens),
                    "num_pieces": st.num_pieces - before.num_pieces,
                    "moves_mid_turn": st.moves_mid_turn - before.moves_mid_turn,
                    "moves_at_boundary": st.moves_at_boundary - before.moves_at_boundary,
                    "direct_wall_s": direct_s,
                    "wall_ratio_vs_direct": wall / direct_s if direct_s else None,
                    "step_s_at_gpu_speed": wall / args.time_scale,
                    "cpu_fraction_at_gpu_speed": cpu / (step_wall / args.time_scale),
                    "proxy_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                })
                print(json.dumps(rows[-1]), flush=True)
            loop = loop_name()
    finally:
        if proc.is_alive():
            parent.send(None)
        proc.join(30)
    if prof is not None:
        stats = pstats.Stats(prof).sort_stats("tottime")
        stats.print_stats(25)
        stats.dump_stats(str(args.cprofile))
    return rows, loop


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2, help="steps after the warm-up step")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--piece-tokens", type=int, default=None,
                    help="pieces while turns may move (default: the gateway's, 512)")
    ap.add_argument("--no-moves", action="store_true", help="the proxy keeps turns where placed")
    ap.add_argument("--no-direct", action="store_true", help="skip the direct round-robin steps")
    ap.add_argument("--cprofile", type=Path, default=None, help="cProfile the last step")
    ap.add_argument("--target", type=float, default=0.05, help="max CPU share")
    ap.add_argument("--loop", choices=LOOP_CHOICES, default="auto",
                    help="the proxy's event loop (auto: uvloop when installed)")
    ap.add_argument("--out", type=Path, default=default_out("proxy/proxy.json"),
                    help="result JSON (default: under the system temp dir)")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    profile_path = args.out.with_suffix(".profile.json")
    load_profile(args.profile).scaled(args.time_scale).save(profile_path)
    try:
        with EmulatorFleet.start(args.replicas, profile=args.profile, time_scale=args.time_scale,
                                 startup_timeout_s=180.0, max_model_len=65536,
                                 max_num_seqs=4096) as fleet:
            rows, loop = run_on_loop(run(args, fleet.urls, profile_path), args.loop)
    finally:
        profile_path.unlink(missing_ok=True)
    steady = rows[1:] or rows
    worst = max(r["cpu_fraction"] for r in steady)
    ratios = [r["wall_ratio_vs_direct"] for r in steady if r["wall_ratio_vs_direct"]]
    result = {
        "benchmark": "proxy_overhead",
        "replicas": args.replicas, "groups": args.groups, "group_size": args.group_size,
        "time_scale": args.time_scale, "profile": args.profile,
        "piece_tokens": args.piece_tokens, "moves": not args.no_moves, "event_loop": loop,
        "steps": rows,
        "max_cpu_fraction_after_warmup": worst,
        "mean_cpu_fraction_after_warmup": sum(r["cpu_fraction"] for r in steady) / len(steady),
        "max_cpu_fraction_at_gpu_speed": max(r["cpu_fraction_at_gpu_speed"] for r in steady),
        "cpu_ms_per_request_after_warmup":
            sum(r["cpu_ms_per_request"] for r in steady) / len(steady),
        "cpu_us_per_delivered_token_after_warmup":
            sum(r["cpu_us_per_delivered_token"] for r in steady) / len(steady),
        "mean_wall_ratio_vs_direct": sum(ratios) / len(ratios) if ratios else None,
        "moves_per_step_after_warmup":
            sum(r["moves_mid_turn"] for r in steady) / len(steady),
        "target_cpu_fraction": args.target,
        "pass": worst < args.target,
        "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "command": "benchmarks/bench_proxy.py " + " ".join(argv if argv is not None
                                                          else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "steps"}, indent=1))


if __name__ == "__main__":
    main()
