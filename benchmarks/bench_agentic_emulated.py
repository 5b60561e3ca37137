"""Agentic presets on emulated replicas: the live session gateway against the agentic simulator.

::

    .venv/bin/python benchmarks/bench_agentic_emulated.py --preset search-agent --replicas 4 \\
        --groups 16 --group-size 4 --steps 3 --out benchmarks/results/agentic_emulated

The emulator's timing is the profile's (known truth), so the live runtime and the simulator
run the same model of the same machine: each policy replays the preset's steps
(``TurnReplay``: forced turn lengths, the recorded tool waits and tool tokens) through its own
``AgenticRollout`` on its own emulated replicas (prefill of uncached contexts at the profile's
prefill model, ``prefill_profile``), the policies' steps interleaved (round t: step t of each,
the order rotating), and the agentic simulator runs the same trajectories under the same
policy. Mid-turn moves take effect as the backend allows: at once on ``--backend sglang``
(``/abort_request`` returns the piece's partial output) and on vLLM with ``--stream`` (the
streamed tokens are kept), else at the running piece's end (``--piece-tokens``); the
simulator models the same (``StepOptions.piece_tokens``). Figures per step, in model seconds
(live wall time / ``time_scale``):
live and simulated step times, each policy's speedup over verl's default (else the first policy) live and simulated,
prefix-cache hit rates (the emulators' ``vllm:prefix_cache_*`` counters and the simulator's)
and moves. Every batch is checked (whole groups, each trajectory once, exact prompts) and its
turns must be the trace's turns.

Admission by KV room: ``--kv-tokens N`` gives every replica (emulated, simulated and the
gateway's cost model alike) a KV budget of ``N`` tokens (a copy of the profile written to
``--out``), for KV-bound cells that fit a small machine; the policy ``tailsieve-nokv`` is
TailSieve with admission off (``GatewayConfig.kv_admission="off"``, the simulator's
``tailsieve-nokv``). Each row also gives the live sessions that waited for room and the
emulators' preemptions per step. ``cpu_share``: the CPU seconds this one process (emulators,
gateway and replay share its event loop) spent per real second of the step: near 1, the loop
is saturated, and the live step stretches beyond the model's (raise ``--time-scale``).
``kv_readings``: the replicas whose KV the gateway read from their ``/metrics`` at the step's end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from outdir import default_out

from tailsieve.model.profiles import load_profile
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.execution.moves import PIECE_TOKENS as DEFAULT_PIECE_TOKENS
from tailsieve.runtime.sessions import AgenticConfig, AgenticRollout, GatewayConfig, ModelClock
from tailsieve.runtime.sessions.replay import TurnReplay
from tailsieve.sim.agentic.compare import replica_configs
from tailsieve.sim.agentic.policies import policy_spec
from tailsieve.sim.agentic.run import RunOptions, simulate_policy
from tailsieve.sim.agentic.step import StepOptions
from tailsieve.workload.agentic_presets import agentic_preset
from tailsieve.workload.turns import Trajectory

BASELINE = "verl-sticky"
LIVE_POLICY = {"tailsieve-nokv": "tailsieve"}  # a simulator policy -> the live one (with
# admission by KV room off)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=default_out("agentic_emulated"))
    p.add_argument("--preset", default="search-agent")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--groups", type=int, default=16)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--policies", default="verl-sticky,cache-aware,turn-round-robin,tailsieve")
    p.add_argument("--profile", default="qwen3-4b-h100")
    p.add_argument("--time-scale", type=float, default=0.05, help="real s per model s")
    p.add_argument("--piece-tokens", type=int, default=256,
                   help="piece cap while turns may move (0: one piece per turn, only where "
                        "moves interrupt pieces)")
    p.add_argument("--backend", choices=("vllm", "sglang"), default="vllm",
                   help="the emulators' API the gateway speaks")
    p.add_argument("--stream", action="store_true", help="vLLM: stream pieces (moves at once)")
    p.add_argument("--stream-interval", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slowdowns", type=lambda t: [float(x) for x in t.split(",") if x],
                   default=[], help="replica r runs this many times slower (a straggler; "
                   "comma-separated, replicas beyond at 1), live and simulated")
    p.add_argument("--kv-tokens", type=int, default=None,
                   help="every replica's KV budget, tokens (default: the profile's)")
    p.add_argument("--fit", action="store_true",
                   help="the gateways price with auto:PROFILE (fitted online, each replica's "
                        "speed included) instead of the fixed profile")
    return p.parse_args(argv)


async def live(args: argparse.Namespace, policies: list[str],
               steps: list[list[Trajectory]]) -> dict[str, list[dict[str, Any]]]:
    """Every step of every policy, each policy on its own fresh emulated replicas and
    through its own rollout (its gateway and balance gate), interleaved: round t runs step
    t of each policy, the order rotating, so that a change of the machine's load falls on
    every policy alike."""
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    max_turns = max(t.num_turns for ts in steps for t in ts)
    model_clock = ModelClock(args.time_scale)  # the gateway prices and checks in model seconds

    async with AsyncExitStack() as stack:
        fleets, ros = {}, {}
        for p in policies:
            emu = [EmulatorConfig.from_profile(args.profile, time_scale=args.time_scale,
                                               seed=i, prefill_profile=True,
                                               max_model_len=1 << 20, slowdown=slowdown(args, i))
                   for i in range(args.replicas)]
            fleets[p] = [await stack.enter_async_context(EmulatorServer(c)) for c in emu]
            gcfg = GatewayConfig(policy=LIVE_POLICY.get(p, p),
                                 kv_admission="off" if p in LIVE_POLICY else "auto",
                                 piece_tokens=args.piece_tokens or None,
                                 profile=f"auto:{args.profile}" if args.fit else args.profile,
                                 stream=args.stream,
                                 stream_interval=args.stream_interval)
            cfg = AgenticConfig(group_size=args.group_size, max_turns=max_turns, gateway=gcfg,
                                backend=Backend(args.backend))
            ros[p] = await stack.enter_async_context(
                AgenticRollout([sv.url for sv in fleets[p]], cfg, clock=model_clock))
        for s, trajs in enumerate(steps):
            for j in range(len(policies)):
                p = policies[(s + j) % len(policies)]
                out[p].append(await live_step(args, ros[p], fleets[p], s, trajs))
    return out


async def live_step(args: argparse.Namespace, ro: AgenticRollout,
                    servers: list[EmulatorServer], s: int,
                    trajs: list[Trajectory]) -> dict[str, Any]:
    replay = TurnReplay(trajs, time_scale=args.time_scale, seed=args.seed * 1000 + s)
    q0 = sum(sv.prefix_cache.query_tokens for sv in servers)
    h0 = sum(sv.prefix_cache.hit_tokens for sv in servers)
    p0 = sum(sv.driver.engine.num_preemptions for sv in servers)
    w0 = ro.gateway.admission.num_waited
    cpu0, wall0 = time.process_time(), time.monotonic()
    batch = await ro.run(replay.prompts(), replay.tool, replay.sampling)
    cpu_s, wall_s = time.process_time() - cpu0, time.monotonic() - wall0
    check_turns(batch.turn_trace().trajectories, trajs)
    q = sum(sv.prefix_cache.query_tokens for sv in servers) - q0
    h = sum(sv.prefix_cache.hit_tokens for sv in servers) - h0
    st = batch.stats
    return {"step": s, "live_step_s": batch.step_s,
            "mid_turn_moves": batch.mid_turn_moves, "hit_rate": h / q if q else 0.0,
            "moves_at_boundary": st.moves_at_boundary, "moves_mid_turn": st.moves_mid_turn,
            "reprefill_tokens": st.reprefill_tokens, "loadavg": loadavg(),
            "preemptions": sum(sv.driver.engine.num_preemptions for sv in servers) - p0,
            "waited": ro.gateway.admission.num_waited - w0,
            "cpu_share": cpu_s / wall_s if wall_s > 0 else 0.0,
            "kv_readings": sum(r is not None for r in ro.gateway.admission.readings)}


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[0]
    except OSError:
        return "n/a"


def check_turns(got: tuple[Trajectory, ...], want: list[Trajectory]) -> None:
    by = {(t.prompt_id, t.sample): t for t in got}
    for w in want:
        g = by[(w.prompt_id, w.sample)]
        if [u.output_tokens for u in g.turns] != [u.output_tokens for u in w.turns]:
            raise AssertionError(f"trajectory {w.key}: turns differ from the trace")


def slowdown(args: argparse.Namespace, replica: int) -> float:
    return args.slowdowns[replica] if replica < len(args.slowdowns) else 1.0


def interrupts(args: argparse.Namespace) -> bool:
    """Whether live mid-turn moves take effect at once (else at the running piece's end)."""
    return args.backend == "sglang" or args.stream


def simulate(args: argparse.Namespace, policy: str, steps: list[list[Trajectory]]
             ) -> list[dict[str, Any]]:
    configs = replica_configs(args.profile, args.replicas, args.slowdowns)
    pieces = None if interrupts(args) else args.piece_tokens or DEFAULT_PIECE_TOKENS
    opts = RunOptions(step=StepOptions(piece_tokens=pieces))
    out = []
    for st in simulate_policy(steps, configs, policy_spec(policy), args.seed, opts):
        assert st is not None
        out.append({"sim_step_s": st.step_s, "sim_hit_rate": st.hit_rate,
                    "sim_preemptions": st.preemptions,
                    "sim_boundary_moves": st.boundary_moves,
                    "sim_midturn_moves": st.midturn_moves, "sim_moves_on": st.moves_on})
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [f"{res['preset']}, R = {res['replicas']}, {res['groups']} x {res['group_size']}, "
             f"profile {res['profile']} (model seconds)", "",
             f"| policy | live mean step | simulated | sim/live | speedup over {res['baseline']} "
             "live | "
             "simulated | hit rate live / sim | moves per step live (boundary / mid-turn) | "
             "preemptions per step live / sim | waited live |",
             "|---|---:|---:|---:|---:|---:|---|---|---|---:|"]
    for p, d in res["policies"].items():
        lines.append(
            f"| {p} | {d['live_mean_step_s']:.1f} | {d['sim_mean_step_s']:.1f} | "
            f"{d['sim_mean_step_s'] / d['live_mean_step_s']:.2f} | {d['live_speedup']:.3f} | "
            f"{d['sim_speedup']:.3f} | {d['live_hit_rate']:.2f} / {d['sim_hit_rate']:.2f} | "
            f"{d['boundary_moves']:.1f} / {d['midturn_moves']:.1f} | "
            f"{d['preemptions']:.1f} / {d['sim_preemptions']:.1f} | {d['waited']:.1f} |")
    return "\n".join(lines) + "\n"


def summarize(res: dict[str, Any]) -> None:
    name = BASELINE if BASELINE in res["policies"] else next(iter(res["policies"]))
    res["baseline"] = name  # verl's default, else the first policy
    base = res["policies"][name]
    for d in res["policies"].values():
        rows = d["steps"]
        mean = statistics.fmean
        d["live_mean_step_s"] = mean(r["live_step_s"] for r in rows)
        d["sim_mean_step_s"] = mean(r["sim_step_s"] for r in rows)
        d["live_hit_rate"] = mean(r["hit_rate"] for r in rows)
        d["sim_hit_rate"] = mean(r["sim_hit_rate"] for r in rows)
        d["boundary_moves"] = mean(r["moves_at_boundary"] for r in rows)
        d["midturn_moves"] = mean(r["moves_mid_turn"] for r in rows)
        d["preemptions"] = mean(r["preemptions"] for r in rows)
        d["sim_preemptions"] = mean(r["sim_preemptions"] for r in rows)
        d["waited"] = mean(r["waited"] for r in rows)
        # paired by step: the mean of per-step ratios
        d["live_speedup"] = mean(b["live_step_s"] / r["live_step_s"]
                                 for b, r in zip(base["steps"], rows, strict=True))
        d["sim_speedup"] = mean(b["sim_step_s"] / r["sim_step_s"]
                                for b, r in zip(base["steps"], rows, strict=True))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.kv_tokens is not None:
        args.profile = str(kv_profile(args.profile, args.kv_tokens, args.out))
    res = run(args)
    (args.out / "agentic_emulated.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "agentic_emulated.md").write_text(markdown(res))
    print(markdown(res))
    return 0


def kv_profile(profile: str, kv_tokens: int, out: Path) -> Path:
    """``profile`` with a KV budget of ``kv_tokens``, written under ``out``."""
    model = load_profile(profile)
    data = model.to_dict()
    data["kv_capacity_tokens"] = kv_tokens
    data["name"] = f"{model.name}-kv{kv_tokens}"
    path = out / f"{data['name']}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Live and simulated, every policy of ``args``: the results (``summarize``d)."""
    trace = agentic_preset(args.preset).generate(args.groups, args.group_size, args.steps,
                                                 rng=args.seed)
    steps = [[t for t in trace.trajectories if t.step == s] for s in trace.steps()]
    res: dict[str, Any] = {"preset": args.preset, "replicas": args.replicas,
                           "groups": args.groups, "group_size": args.group_size,
                           "profile": args.profile, "time_scale": args.time_scale,
                           "piece_tokens": args.piece_tokens, "seed": args.seed,
                           "backend": args.backend, "stream": args.stream,
                           "moves_at_once": interrupts(args), "slowdowns": args.slowdowns,
                           "fit": args.fit, "policies": {}}
    policies = [x for x in args.policies.split(",") if x]
    rows = asyncio.run(live(args, policies, steps))
    for p in policies:
        for r, sim in zip(rows[p], simulate(args, p, steps), strict=True):
            r.update(sim)
        res["policies"][p] = {"steps": rows[p]}
    summarize(res)
    return res


if __name__ == "__main__":
    raise SystemExit(main())
