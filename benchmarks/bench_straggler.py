"""A straggler in the fleet: one of three replicas slowed 4x, simulated and live on emulated
replicas, every session router against verl's default.

::

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_straggler.py \\
        --out benchmarks/results/straggler

Simulated (``sim.agentic.compare``, paired per seed and step): each of ``--presets`` on
``--replicas`` replicas of ``--profile``, replica ``R-1`` ``--slowdown`` times slower at everything it times
(``ReplicaConfig.scaled``), ``--groups`` x ``--group-size`` trajectories, ``--seeds`` seeds,
the routers of ``--policies``; beside them ``tailsieve-shared-curve``: TailSieve pricing every
replica with one curve (the unslowed profile: what it did before each replica's speed was
fitted). Live (``bench_agentic_emulated.run``): the same scenario on ``--live-preset``, smaller
(``--live-groups`` x ``--live-group-size``, ``--live-steps`` steps), each policy through its
own ``AgenticRollout`` on its own emulated replicas, the last one started with
``--slowdown``; the gateways price with ``auto:PROFILE`` (each replica's speed fitted from the
pieces it times, nothing told), the simulator runs the same trajectories beside. Proxy
(issue 40's run): ``RoutingProxy`` over the replicas in real time, the last
``--proxy-slowdown`` times slower, ``--proxy-requests`` long completions at once, with moves and
without. Writes ``straggler.json`` and ``straggler.md``; ``--no-sim`` / ``--no-live`` /
``--no-proxy`` skip a part; ``--smoke`` is a tiny run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import bench_agentic_emulated as emulated
import numpy as np
from outdir import default_out

from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy
from tailsieve.runtime.sessions import GatewayConfig
from tailsieve.sim.agentic.compare import (
    AgenticSetup,
    compare_policies,
    replica_configs,
    setup_steps,
)
from tailsieve.sim.agentic.policies import BASELINE, policy_spec
from tailsieve.sim.agentic.report import best_other, format_speedup
from tailsieve.sim.agentic.run import RunOptions, simulate_policy
from tailsieve.sim.agentic.step import StepOptions
from tailsieve.sim.speedup_stats import t_interval

POLICIES = "verl-sticky,sticky-least-loaded,cache-aware,affinity-margin,tailsieve"
SHARED = "tailsieve-shared-curve"
TARGET = 1.3  # TailSieve's step at least 1.3x shorter than verl's default (issue 39)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=default_out("straggler"))
    ap.add_argument("--presets", default="swe-agent,math-code-agent", help="simulated")
    ap.add_argument("--live-preset", default="math-code-agent")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--slowdown", type=float, default=4.0, help="the last replica's")
    ap.add_argument("--profile", default="qwen3-4b-h100")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--measured-steps", type=int, default=1)
    ap.add_argument("--live-groups", type=int, default=8)
    ap.add_argument("--live-group-size", type=int, default=4)
    ap.add_argument("--live-steps", type=int, default=3)
    ap.add_argument("--time-scale", type=float, default=0.1, help="live: real s per model s")
    ap.add_argument("--backend", choices=("vllm", "sglang"), default="sglang",
                    help="live: the emulators' API (sglang: a move interrupts at once)")
    ap.add_argument("--proxy-slowdown", type=float, default=5.0, help="proxy: the last "
                    "replica's (issue 40's run)")
    ap.add_argument("--proxy-requests", type=int, default=12)
    ap.add_argument("--proxy-tokens", type=int, default=1500)
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--no-live", action="store_true")
    ap.add_argument("--no-proxy", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a tiny run (tests)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.groups, args.group_size, args.seeds, args.warmup_steps = 2, 2, 1, 1
        args.live_groups, args.live_group_size, args.live_steps = 2, 2, 1
        args.time_scale, args.presets, args.live_preset = 0.005, "search-agent", "search-agent"
        args.policies = "verl-sticky,affinity-margin,tailsieve"
        args.proxy_requests, args.proxy_tokens = 3, 64
    return args


def slowdowns(args: argparse.Namespace) -> tuple[float, ...]:
    return (1.0,) * (args.replicas - 1) + (args.slowdown,)


def simulated(args: argparse.Namespace, preset: str) -> dict[str, Any]:
    """Every policy and the shared-curve TailSieve on the straggler fleet, paired."""
    policies = [p for p in args.policies.split(",") if p]
    setup = AgenticSetup(preset, args.replicas, args.profile, args.groups,
                         args.group_size, args.warmup_steps, args.measured_steps,
                         tuple(range(args.seeds)), slowdowns=slowdowns(args))
    res = compare_policies(setup, policies)
    rows = {p: r.summary() for p, r in res.items()}
    best = best_other(rows)  # of the routers users run (TailSieve's own rows left out)
    if "tailsieve" in policies:
        rows[SHARED] = shared_curve(setup, res[BASELINE].step_s)
    return {"preset": preset, "replicas": args.replicas, "slowdowns": slowdowns(args),
            "groups": args.groups, "group_size": args.group_size, "seeds": args.seeds,
            "warmup_steps": args.warmup_steps, "measured_steps": args.measured_steps,
            "profile": args.profile, "policies": rows, "best_other": best}


def shared_curve(setup: AgenticSetup, base_step_s: list[float]) -> dict[str, Any]:
    """TailSieve whose routers price every replica with the unslowed profile, paired with
    verl's measured steps (``base_step_s``, seeds in order)."""
    truth = replica_configs(setup.profile, setup.replicas, setup.slowdowns)
    one = tuple(replica_configs(setup.profile, setup.replicas))
    opts = RunOptions(step=StepOptions(priced_as=one))
    per_seed, steps = [], []
    n = setup.measured_steps
    for j, seed in enumerate(setup.seeds):
        got = [st for st in simulate_policy(setup_steps(setup, seed), truth,
                                            policy_spec("tailsieve"), seed, opts,
                                            setup.warmup_steps)[setup.warmup_steps:]
               if st is not None]
        base = base_step_s[j * n:(j + 1) * n]
        per_seed.append(float(np.mean([b / s.step_s for b, s in zip(base, got, strict=True)])))
        steps.extend(s.step_s for s in got)
    mean, lo, hi = t_interval(per_seed)
    return {"policy": SHARED, "speedup": mean, "ci_low": lo, "ci_high": hi,
            "per_seed": per_seed, "step_s": float(np.mean(steps))}


def live(args: argparse.Namespace) -> dict[str, Any]:
    """The same scenario on emulated replicas (``bench_agentic_emulated``), gateways fitting
    each replica's speed online."""
    argv = ["--preset", args.live_preset, "--replicas", str(args.replicas),
            "--groups", str(args.live_groups), "--group-size", str(args.live_group_size),
            "--steps", str(args.live_steps), "--policies", args.policies,
            "--profile", args.profile, "--time-scale", str(args.time_scale),
            "--backend", args.backend, "--slowdowns", ",".join(map(str, slowdowns(args))),
            "--fit", "--out", str(args.out)]
    return emulated.run(emulated.parse_args(argv))


def proxy(args: argparse.Namespace) -> dict[str, Any]:
    """``tailsieve serve``'s engine (``RoutingProxy``, in this process) over ``--replicas``
    emulated vLLM replicas in real time, the last ``--proxy-slowdown`` times slower:
    ``--proxy-requests`` completions of ``--proxy-tokens`` tokens at once, with moves and
    without (``--no-moves``); wall time and moves of each."""
    return {"slowdown": args.proxy_slowdown, "requests": args.proxy_requests,
            "tokens": args.proxy_tokens,
            "runs": [asyncio.run(proxy_run(args, moves)) for moves in (True, False)]}


async def proxy_run(args: argparse.Namespace, moves: bool) -> dict[str, Any]:
    async with AsyncExitStack() as st:
        urls = []
        for i in range(args.replicas):
            slow = args.proxy_slowdown if i == args.replicas - 1 else 1.0
            emu = EmulatorConfig.from_profile(args.profile, seed=i, slowdown=slow)
            urls.append((await st.enter_async_context(EmulatorServer(emu))).url)
        gw = GatewayConfig(profile=f"auto:{args.profile}", moves=moves, stream=True)
        px = await st.enter_async_context(RoutingProxy(ProxyConfig(
            endpoints=tuple(urls), backend=Backend.VLLM, gateway=gw)))
        await px.start()
        async with aiohttp.ClientSession() as http:
            async def one(i: int) -> None:
                body = {"model": "tailsieve-emulated", "prompt": list(range(100 + i, 400 + i)),
                        "max_tokens": args.proxy_tokens, "ignore_eos": True}
                async with http.post(px.url + "/v1/completions", json=body) as r:
                    got = await r.json()
                    assert got["usage"]["completion_tokens"] == args.proxy_tokens, got
            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(args.proxy_requests)))
            wall = time.perf_counter() - t0
        assert px.gateway is not None
        st_ = px.gateway.stats()
        return {"moves": moves, "wall_s": wall, "moves_mid_turn": st_.moves_mid_turn,
                "moves_at_boundary": st_.moves_at_boundary,
                "turns_per_replica": [r.num_turns for r in st_.replicas]}


def markdown(res: dict[str, Any]) -> str:
    lines = []
    for sim in res.get("simulated", []):
        lines += [f"Simulated: {sim['preset']}, R = {sim['replicas']} (slowdowns "
                  f"{sim['slowdowns']}), {sim['groups']} x {sim['group_size']}, "
                  f"{sim['seeds']} seeds, profile {sim['profile']}; best other router: "
                  f"{sim['best_other']}", "",
                  "| policy | over verl-sticky (95% CI) | step s | boundary / mid-turn moves "
                  "per step |", "|---|---|---:|---|"]
        for p, r in sim["policies"].items():
            moves = (f"{r['boundary_moves_per_step']:.0f} / {r['midturn_moves_per_step']:.0f}"
                     if "boundary_moves_per_step" in r else "")
            lines.append(f"| {p} | {format_speedup(r)} | {r['step_s']:.1f} | {moves} |")
        lines.append("")
    px = res.get("proxy")
    if px is not None:
        on, off = px["runs"]
        lines += [f"Proxy (real time, last replica {px['slowdown']:g}x slower, "
                  f"{px['requests']} x {px['tokens']} tokens): moves {on['wall_s']:.1f} s "
                  f"({on['moves_mid_turn']} mid-turn moves), --no-moves {off['wall_s']:.1f} s: "
                  f"{off['wall_s'] / on['wall_s']:.2f}x", ""]
    lv = res.get("live")
    if lv is not None:
        lines += [f"Live (emulated, {lv['backend']}, gateways on auto:{lv['profile']}): "
                  + emulated.markdown(lv)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"target": TARGET}
    if not args.no_sim:
        res["simulated"] = [simulated(args, p) for p in args.presets.split(",") if p]
    if not args.no_live:
        res["live"] = live(args)
    if not args.no_proxy:
        res["proxy"] = proxy(args)
    (args.out / "straggler.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "straggler.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
