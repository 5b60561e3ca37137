"""End to end on the real vLLM CPU engine: live step times vs the simulator's prediction.

::

    .venv/bin/python benchmarks/bench_real_engine.py --out benchmarks/results/real_engine.json

1. Servers: ``--endpoints URL,URL`` uses running servers; otherwise two are started with
   ``scripts/start_vllm_servers.sh 2`` (one core each, the tiny model) and stopped at the end.
2. Profiles: each server is measured with the project's profiler (``tailsieve profile``'s code
   path), once with both servers measured in lockstep (``profile_endpoints``, as ``tailsieve
   profile --endpoint A --endpoint B``: every round runs on both at once, the load a live step
   puts on the 2-core machine) and once one after the other (a server alone); then, because
   the machine's speed drifts over minutes, in lockstep again right before each policy's live
   steps (the primary prediction uses that one). Saved as
   ``benchmarks/results/profile_<port>_<mode>.json``.
3. Live: S TailSieve steps (plus the flush that drains the carried prompts) and then S Uniform
   steps through ``TailSieveRollout`` in replay mode (``max_tokens = L``, ``ignore_eos``), AIME
   lengths scaled so the longest fits ``max-model-len`` minus the prompt. Every batch is
   checked: N groups of n responses, each response exactly its forced length
   (``finish_reason == "length"``), no prompt delivered twice.
4. Prediction: ``SimExecutor`` on exactly the live plans and lengths with the mean measured
   profile (per-step replay), plus a closed-loop ``tailsieve simulate``-style run (the protocol
   and the controller on the simulator, same prompt order). The per-request fixed cost the
   simulator charges (``ReplicaConfig.prefill_s``) is the measured time to first token at b=1
   (median client latency of a ``max_tokens=1`` request: HTTP + queueing + prefill + one
   token), taken right after the profiler run. (The profiler's own ``overhead_s`` at b=1 is
   kept in the profile files but was too noisy on the shared machine, even negative.)
   Variants with no prefill cost and with the profile measured with one server alone are
   reported too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.errors import ReplicaError
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.backends import PromptInput, SamplingParams
from tailsieve.runtime.profiler import (
    ProfileResult,
    ProfileSettings,
    profile_endpoint,
    profile_endpoints,
)
from tailsieve.runtime.replay import ReplayLengths
from tailsieve.runtime.rollout import RolloutConfig, TailSieveRollout
from tailsieve.runtime.step_state import StepResult
from tailsieve.sim.executor import SimExecutor
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.workload.presets import AIME_TRACE_IN_REPO

ROOT = Path(__file__).resolve().parents[1]
AIME = AIME_TRACE_IN_REPO
RESULTS = ROOT / "benchmarks" / "results"


def loadavg() -> str:
    """``/proc/loadavg`` (the machine is shared; recorded with every measurement)."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "n/a"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}  (loadavg {loadavg()})", file=sys.stderr,
          flush=True)


# ----------------------------------------------------------------------------- servers


class Servers:
    """Endpoints to use; starts/stops two servers with the project's scripts when none given."""

    def __init__(self, endpoints: list[str] | None) -> None:
        self.endpoints = endpoints or []
        self.started = False

    def __enter__(self) -> Servers:
        if not self.endpoints:
            log("starting 2 vLLM servers with scripts/start_vllm_servers.sh")
            out = subprocess.run(
                ["bash", str(ROOT / "scripts" / "start_vllm_servers.sh"), "2"],
                check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT,
            )
            self.started = True
            self.endpoints = [u for u in out.stdout.strip().split(",") if u]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            log("stopping the servers (scripts/stop_vllm_servers.sh)")
            subprocess.run(["bash", str(ROOT / "scripts" / "stop_vllm_servers.sh")],
                           check=False, cwd=ROOT)


async def served_model(url: str) -> tuple[str, int]:
    """Served model id and ``max_model_len`` of a server."""
    async with aiohttp.ClientSession() as s, s.get(url + "/v1/models") as r:
        d = (await r.json())["data"][0]
    return str(d["id"]), int(d.get("max_model_len") or 1024)


async def prompt_tokens(url: str, model: str, texts: list[str]) -> dict[str, int]:
    """Prompt length in tokens of each text (``POST /tokenize``)."""
    out: dict[str, int] = {}
    async with aiohttp.ClientSession() as s:
        for t in texts:
            async with s.post(url + "/tokenize", json={"model": model, "prompt": t}) as r:
                out[t] = int((await r.json())["count"])
    return out


# ----------------------------------------------------------------------------- profiles


async def first_token_s(url: str, model: str, prompt: str, reps: int = 7) -> float:
    """Median client-side latency of a 1-token request at b=1 (HTTP + queueing + prefill +
    first token): the per-request fixed cost the simulator charges as ``prefill_s``."""
    times: list[float] = []
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:
        for _ in range(reps):
            t0 = time.perf_counter()
            async with s.post(url + "/v1/completions", json=body) as r:
                await r.read()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


@dataclass(frozen=True, slots=True)
class Profiled:
    """Profiles of all servers measured in one mode."""

    mode: str  # concurrent | sequential | before_<policy> (lockstep, right before that phase)
    results: tuple[ProfileResult, ...]
    files: tuple[str, ...]
    wall_s: float
    loadavg_before: str
    loadavg_after: str

    def mean_model(self) -> ThroughputModel:
        """tau(b) averaged over the servers at each measured batch size (running max)."""
        bs = [p.batch_size for p in self.results[0].model.points]
        pairs: list[tuple[int, float]] = []
        top = 0.0
        for b in bs:
            top = max(top, statistics.fmean(r.model.tau(b) for r in self.results))
            pairs.append((b, top))
        return ThroughputModel.from_pairs(pairs, name=f"real-mean-{self.mode}",
                                          source=f"mean of {', '.join(self.files)}")

    def overhead_b1_s(self) -> float:
        """Mean over servers of the profiler's fixed cost at b=1 (TTFT + HTTP as seen by the
        client): the per-request ``prefill_s`` given to the simulator."""
        return statistics.fmean(r.measurements[0].overhead_s for r in self.results)

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "files": list(self.files),
            "wall_s": round(self.wall_s, 2),
            "loadavg_before": self.loadavg_before,
            "loadavg_after": self.loadavg_after,
            "per_server": [
                {
                    "file": f,
                    "tau_s": {str(m.batch_size): round(m.step_s, 6) for m in r.measurements},
                    "tokens_per_s_b1": round(1.0 / r.measurements[0].step_s, 1),
                    "overhead_s": {str(m.batch_size): round(m.overhead_s, 4)
                                   for m in r.measurements},
                }
                for f, r in zip(self.files, self.results, strict=True)
            ],
            "overhead_b1_s": round(self.overhead_b1_s(), 4),
        }


async def measure_profiles(endpoints: list[str], model: str, batch_sizes: tuple[int, ...],
                           tokens: int, repeats: int, mode: str,
                           label: str | None = None) -> Profiled:
    """Run the profiler on every endpoint (``concurrent``: in lockstep; else one after the
    other); files are named by ``label`` (default: the mode)."""
    label = label or mode
    before, t0 = loadavg(), time.perf_counter()
    settings = [ProfileSettings(endpoint=u, batch_sizes=batch_sizes, tokens=tokens, model=model,
                                repeats=repeats) for u in endpoints]
    names = [f"real-{u.rsplit(':', 1)[-1]}-{label}" for u in endpoints]

    async def one(s: ProfileSettings, n: str) -> ProfileResult:
        # one retry: the profiler's pooled keep-alive connections occasionally hit
        # "Server disconnected" on this machine (see the report); a retry measures afresh
        try:
            return await profile_endpoint(s, n)
        except ReplicaError as exc:
            log(f"profiling {s.endpoint} failed ({exc}); measuring it again")
            return await profile_endpoint(s, n)

    if mode == "concurrent":
        # `tailsieve profile --endpoint A --endpoint B`: every round on both servers at once
        try:
            results = await profile_endpoints(settings, names)
        except ReplicaError as exc:
            log(f"lockstep profiling failed ({exc}); measuring again")
            results = await profile_endpoints(settings, names)
    else:
        results = [await one(s, n) for s, n in zip(settings, names, strict=True)]
    files: list[str] = []
    for u, r in zip(endpoints, results, strict=True):
        path = RESULTS / f"profile_{u.rsplit(':', 1)[-1]}_{label}.json"
        data = r.to_dict()
        data["loadavg_before"], data["loadavg_after"] = before, loadavg()
        path.write_text(json.dumps(data, indent=2) + "\n")
        files.append(str(path.relative_to(ROOT)))
    return Profiled(label, tuple(results), tuple(files), time.perf_counter() - t0, before,
                    loadavg())


# ----------------------------------------------------------------------------- live steps


@dataclass(slots=True)
class LiveStep:
    """One live step: its plan, outcome and what the checks saw."""

    plan: StepPlan
    outcome: StepOutcome
    wall_s: float
    loadavg: str


def plan_dict(plan: StepPlan) -> dict[str, Any]:
    return {
        "step": plan.step, "q": plan.q, "m": plan.m, "num_extra": plan.num_extra,
        "num_fresh_to_deliver": plan.num_fresh_to_deliver, "is_flush": plan.is_flush,
        "tail_replicas": list(plan.tail_replicas), "bulk_replicas": list(plan.bulk_replicas),
        "assignments": [
            {"prompt_id": a.prompt_id, "pool": a.pool.value, "replica": a.replica,
             "pinned": a.pinned, "order": a.order}
            for a in plan.assignments
        ],
    }


def outcome_dict(o: StepOutcome) -> dict[str, Any]:
    return {
        "makespan_s": round(o.makespan_s, 4), "tail_time_s": round(o.tail_time_s, 4),
        "bulk_cut_s": round(o.bulk_cut_s, 4), "wasted_tokens": o.wasted_tokens,
        "generated_tokens": o.generated_tokens,
        "replica_busy_s": [round(b, 4) for b in o.replica_busy_s],
        "delivered": [{"prompt_id": g.prompt_id, "replica": g.replica, "pool": g.pool.value,
                       "completion_s": round(g.completion_s, 4),
                       "response_tokens": list(g.response_tokens)} for g in o.delivered],
        "aborted": [g.prompt_id for g in o.aborted],
    }


async def run_live(policy: str, endpoints: list[str], model: str, lengths: ReplayLengths,
                   prompts: list[PromptInput], groups: int, group_size: int, steps: int,
                   profile_path: str, flush: bool) -> list[LiveStep]:
    """Drive ``steps`` steps (plus a flush when asked) through ``TailSieveRollout``; check
    every batch is complete and exact."""
    cfg = RolloutConfig(
        num_groups=groups, group_size=group_size, policy=policy, model=model,
        sampling=SamplingParams(max_tokens=1024, temperature=1.0, seed=0),
        replay=lengths, request_timeout_s=600.0, profile=profile_path,
    )
    out: list[LiveStep] = []
    source = list(prompts)
    delivered: list[str] = []
    async with TailSieveRollout(endpoints, cfg) as ro:
        captured: list[tuple[StepPlan, StepResult]] = []
        inner = ro.executor.run

        async def recording_run(plan: StepPlan, by_id: Mapping[str, PromptInput]) -> StepResult:
            res = await inner(plan, by_id)
            captured.append((plan, res))
            return res

        ro.executor.run = recording_run  # type: ignore[method-assign,assignment]
        for i in range(steps + (1 if flush else 0)):
            if i < steps:
                k = ro.num_fresh_needed()
                new, source = source[:k], source[k:]
                batch = await ro.step(new)
                assert len(batch.groups) == groups, (policy, i, len(batch.groups))
            else:
                got = await ro.flush()
                if got is None:
                    break
                batch = got
            for g in batch.groups:
                toks = [r.num_tokens for r in g.responses]
                want = [lengths(g.prompt_id, j) for j in range(group_size)]
                assert toks == want, f"{policy} step {i} {g.prompt_id}: {toks} != {want}"
                assert all(r.finish_reason == "length" for r in g.responses), g.prompt_id
            delivered += [g.prompt_id for g in batch.groups]
            plan, res = captured[-1]
            out.append(LiveStep(plan, res.outcome, batch.metrics.wall_s, loadavg()))
            log(f"{policy} step {plan.step}: makespan {res.outcome.makespan_s:.3f} s "
                f"q={plan.q} m={plan.m} aborted={len(res.outcome.aborted)}")
    assert len(delivered) == len(set(delivered)), f"{policy}: a prompt was delivered twice"
    return out


# ----------------------------------------------------------------------------- simulation


def median_model(profiles: list[Profiled]) -> ThroughputModel:
    """Per batch size the median tau over every measured curve (all servers, all modes), then
    the running maximum: one disturbed round (seen: tau(1) = 26 ms next to 2.4 ms) no longer
    lifts the whole monotone curve."""
    curves = [r for p in profiles for r in p.results]
    pairs: list[tuple[int, float]] = []
    top = 0.0
    for pt in curves[0].model.points:
        b = pt.batch_size
        top = max(top, statistics.median(m.step_s for r in curves for m in r.measurements
                                         if m.batch_size == b))
        pairs.append((b, top))
    return ThroughputModel.from_pairs(pairs, name="real-median-all",
                                      source="median over all measured curves")


def replica_rates(o: StepOutcome) -> dict[str, float]:
    """Effective ms per token on each replica: completion of its last delivered group over
    that group's longest response (diagnostic for noisy neighbours)."""
    out: dict[str, float] = {}
    for g in o.delivered:
        if g.response_tokens:
            key = str(g.replica)
            rate = 1000 * g.completion_s / max(g.response_tokens)
            if g.completion_s >= max((x.completion_s for x in o.delivered
                                      if x.replica == g.replica), default=0.0):
                out[key] = round(rate, 2)
    return out


def sim_pools(model: ThroughputModel, prefill_s: float) -> PoolConfigs:
    return PoolConfigs.single(ReplicaConfig(throughput=model, prefill_s=prefill_s))


def replay_sim(live: list[LiveStep], pools: PoolConfigs, lengths: ReplayLengths,
               n: int) -> list[StepOutcome]:
    """The simulator on exactly the live plans and lengths."""
    ex = SimExecutor(pools)
    return [ex.run(s.plan, lambda pid, _st: [lengths(pid, j) for j in range(n)]) for s in live]


def closed_loop_sim(policy: str, pools: PoolConfigs, profile: ThroughputModel,
                    lengths: ReplayLengths, prompt_ids: list[str], groups: int, n: int,
                    num_replicas: int, steps: int, flush: bool) -> list[StepOutcome]:
    """``tailsieve simulate``-style: the protocol and its controller driven by the simulator
    (its own plans), same prompt order and lengths."""
    ccfg = ControllerConfig(num_groups=groups, num_replicas=num_replicas, group_size=n)
    proto = RolloutProtocol(
        ProtocolConfig(num_replicas=num_replicas, num_groups=groups, group_size=n),
        make_controller(policy, ccfg, profile),
    )
    stream = PromptStream(iter(prompt_ids))
    ex = SimExecutor(pools)
    out: list[StepOutcome] = []
    for i in range(steps + (1 if flush else 0)):
        if i == steps and not proto.candidates:
            break
        plan = proto.plan_step(stream, flush=i == steps)
        o = ex.run(plan, lambda pid, _st: [lengths(pid, j) for j in range(n)])
        proto.update_from_outcome(plan, o)
        out.append(o)
    return out


def rel_err(sim: float, live: float) -> float:
    return (sim - live) / live if live > 0 else float("nan")


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--out", default=str(RESULTS / "real_engine.json"))
    p.add_argument("--endpoints", default=os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", ""),
                   help="comma-separated running servers (else 2 are started here)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--groups", type=int, default=8, help="N groups per batch")
    p.add_argument("--group-size", type=int, default=4, help="n responses per group")
    p.add_argument("--length-scale", type=float, default=None,
                   help="AIME length scale (default: longest fits max-model-len - prompt)")
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32")
    p.add_argument("--profile-tokens", type=int, default=600)
    p.add_argument("--profile-repeats", type=int, default=3)
    p.add_argument("--trace", default=str(AIME))
    return p.parse_args(argv)


async def amain(args: argparse.Namespace, endpoints: list[str]) -> dict[str, Any]:
    model, max_len = await served_model(endpoints[0])
    n, groups, steps = args.group_size, args.groups, args.steps
    raw = ReplayLengths.from_file(args.trace)
    # prompts in trace order: TailSieve draws N + c fresh per step; give enough for both
    all_ids = list(raw.lengths)
    prompt_ids = all_ids[: groups * (steps + 2) * 2]
    ptoks = await prompt_tokens(endpoints[0], model, prompt_ids)
    max_prompt = max(ptoks.values())
    longest = max(max(raw.lengths[p]) for p in prompt_ids)
    budget = max_len - max_prompt
    scale = args.length_scale if args.length_scale else budget / max(
        max(v) for v in raw.lengths.values())
    lengths = ReplayLengths(raw.lengths, length_scale=scale, min_tokens=1, max_tokens=budget)
    prompts = [PromptInput(pid, text=pid) for pid in prompt_ids]
    log(f"model {model}, max_model_len {max_len}, longest prompt {max_prompt} tokens, "
        f"length scale {scale:.5f} (longest AIME response used {longest} -> "
        f"{min(budget, round(longest * scale))} tokens)")

    bs = tuple(int(b) for b in args.batch_sizes.split(","))
    log("profiling both servers at once (the load of a live step)")
    conc = await measure_profiles(endpoints, model, bs, args.profile_tokens,
                                  args.profile_repeats, "concurrent")
    log("profiling each server alone")
    seq = await measure_profiles(endpoints, model, bs, args.profile_tokens,
                                 args.profile_repeats, "sequential")
    ttft = [await first_token_s(u, model, prompts[0].text or "") for u in endpoints]
    prefill_s = statistics.fmean(ttft)
    log(f"time to first token (b=1, max_tokens=1, median of 7): {ttft}")
    mean_conc = conc.mean_model()
    mean_path = RESULTS / "profile_mean_concurrent.json"
    mean_conc.save(mean_path)

    live: dict[str, list[LiveStep]] = {}
    live_load: dict[str, tuple[str, str]] = {}
    fresh: dict[str, Profiled] = {}
    for policy in ("tailsieve", "uniform"):
        # the machine's speed drifts over minutes: profile again right before each live phase
        log(f"profiling both servers in lockstep right before the {policy} steps")
        fresh[policy] = await measure_profiles(endpoints, model, bs, args.profile_tokens,
                                               args.profile_repeats, "concurrent",
                                               label=f"before_{policy}")
        before = loadavg()
        log(f"live {policy}: {steps} steps of N={groups} x n={n}")
        live[policy] = await run_live(policy, endpoints, model, lengths, prompts, groups, n,
                                      steps, str(mean_path), flush=policy == "tailsieve")
        live_load[policy] = (before, loadavg())
        partial = {pol: [{"plan": plan_dict(x.plan), "outcome": outcome_dict(x.outcome),
                          "loadavg": x.loadavg} for x in steps_]
                   for pol, steps_ in live.items()}
        Path(args.out).write_text(json.dumps({"partial_live": partial}, indent=2) + "\n")

    variants = {
        "concurrent_profile+prefill": sim_pools(mean_conc, prefill_s),
        "concurrent_profile,no_prefill": sim_pools(mean_conc, 0.0),
        "alone_profile+prefill": sim_pools(seq.mean_model(), prefill_s),
        "median_all_profiles+prefill": sim_pools(median_model([conc, seq]), prefill_s),
    }
    primary = "fresh_profile+prefill"
    policies: dict[str, Any] = {}
    for policy, ls in live.items():
        live_t = [s.outcome.makespan_s for s in ls]
        fresh_model = fresh[policy].mean_model()
        mine = {primary: sim_pools(fresh_model, prefill_s), **variants}
        sims = {k: replay_sim(ls, v, lengths, n) for k, v in mine.items()}
        loop = closed_loop_sim(policy, mine[primary], fresh_model, lengths, prompt_ids,
                               groups, n, len(endpoints), steps, flush=policy == "tailsieve")
        rows: list[dict[str, Any]] = []
        for i, s in enumerate(ls):
            rows.append({
                "step": s.plan.step, "q": s.plan.q, "m": s.plan.m, "is_flush": s.plan.is_flush,
                "live_makespan_s": round(s.outcome.makespan_s, 4),
                "live_tail_time_s": round(s.outcome.tail_time_s, 4),
                "live_bulk_cut_s": round(s.outcome.bulk_cut_s, 4),
                "live_wall_s": round(s.wall_s, 4),
                "live_ms_per_token_last_group_by_replica": replica_rates(s.outcome),
                "sim_makespan_s": {k: round(v[i].makespan_s, 4) for k, v in sims.items()},
                "sim_tail_time_s": round(sims[primary][i].tail_time_s, 4),
                "sim_bulk_cut_s": round(sims[primary][i].bulk_cut_s, 4),
                "rel_err": {k: round(rel_err(v[i].makespan_s, s.outcome.makespan_s), 4)
                            for k, v in sims.items()},
                "loadavg": s.loadavg,
                "plan": plan_dict(s.plan),
                "live_outcome": outcome_dict(s.outcome),
                "sim_outcome": outcome_dict(sims[primary][i]),
            })
        total_live = sum(live_t)
        totals = {k: sum(o.makespan_s for o in v) for k, v in sims.items()}
        policies[policy] = {
            "steps": rows,
            "live_total_s": round(total_live, 4),
            "sim_total_s": {k: round(v, 4) for k, v in totals.items()},
            "total_rel_err": {k: round(rel_err(v, total_live), 4) for k, v in totals.items()},
            "max_step_abs_rel_err": {
                k: round(max(abs(r["rel_err"][k]) for r in rows), 4) for k in mine},
            "fresh_profile": fresh[policy].summary(),
            "closed_loop_sim": {
                "step_makespans_s": [round(o.makespan_s, 4) for o in loop],
                "total_s": round(sum(o.makespan_s for o in loop), 4),
                "total_rel_err_vs_live": round(
                    rel_err(sum(o.makespan_s for o in loop), total_live), 4),
            },
            "loadavg_before": live_load[policy][0],
            "loadavg_after": live_load[policy][1],
        }
    return {
        "what": "live vLLM CPU steps vs SimExecutor prediction on the same plans and lengths",
        "endpoints": endpoints,
        "model": model,
        "max_model_len": max_len,
        "groups": groups, "group_size": n, "steps": steps,
        "length_scale": scale, "max_forced_tokens": budget,
        "trace": str(Path(args.trace).name),
        "prompt_ids": prompt_ids,
        "ttft_b1_s": ttft,
        "profiles": {"concurrent": conc.summary(), "sequential": seq.summary(),
                     "mean_concurrent_file": str(mean_path.relative_to(ROOT)),
                     "mean_concurrent_tau_s": {str(p.batch_size): p.step_s
                                               for p in mean_conc.points}},
        "sim_variants": {
            "fresh_profile+prefill": "mean of the lockstep profiles (`tailsieve profile "
            "--endpoint A --endpoint B`) measured right before that policy's live steps; "
            f"prefill_s = measured time to first token at b=1 = {prefill_s:.4f} s (primary)",
            "concurrent_profile+prefill": "the same kind of profile measured at the start of "
            f"the run, before the alone profiles; prefill_s = {prefill_s:.4f} s",
            "concurrent_profile,no_prefill": "same profile, prefill_s = 0",
            "alone_profile+prefill": "mean of the profiles measured one server at a time; "
            f"prefill_s = {prefill_s:.4f} s",
            "median_all_profiles+prefill": "per batch size the median over all four measured "
            "curves (2 servers x concurrent/alone), running max; robust to one disturbed "
            f"round; prefill_s = {prefill_s:.4f} s",
        },
        "primary_variant": primary,
        "policies": policies,
        "checks": "every batch N groups x n responses, each exactly its forced length "
                  "(finish_reason length), no prompt delivered twice: passed",
        "machine_loadavg_end": loadavg(),
        "nproc": os.cpu_count(),
    }


def write_markdown(res: dict[str, Any], path: Path) -> None:
    """Side-by-side table: policy, live step times, simulated, error."""
    pv = res["primary_variant"]
    lines = [
        "# Real vLLM CPU engine vs simulator",
        "",
        f"2 vLLM CPU servers (1 core each, {res['model']}), N={res['groups']} groups x "
        f"n={res['group_size']}, {res['steps']} steps (+ flush for TailSieve), AIME lengths x "
        f"{res['length_scale']:.5f} (<= {res['max_forced_tokens']} tokens), replay "
        "(ignore_eos). Simulator: SimExecutor on the same plans and lengths, "
        f"variant `{pv}`: {res['sim_variants'][pv]}.",
        "",
        "| policy | step | q | m | live s | sim s | err | sim s (profile at run start) | "
        "err (run start) | sim s (alone profile) | sim s (median profile) | "
        "live ms/token by replica | loadavg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for pol, d in res["policies"].items():
        for r in d["steps"]:
            sm = r["sim_makespan_s"]
            lines.append(
                f"| {pol} | {r['step']}{' (flush)' if r['is_flush'] else ''} | {r['q']} | "
                f"{r['m']} | {r['live_makespan_s']:.3f} | {sm[pv]:.3f} | "
                f"{r['rel_err'][pv]:+.1%} | {sm['concurrent_profile+prefill']:.3f} | "
                f"{r['rel_err']['concurrent_profile+prefill']:+.1%} | "
                f"{sm['alone_profile+prefill']:.3f} | {sm['median_all_profiles+prefill']:.3f} | "
                f"{r['live_ms_per_token_last_group_by_replica']} | {r['loadavg'].split()[0]} |")
        st = d["sim_total_s"]
        lines.append(
            f"| **{pol} total** | | | | **{d['live_total_s']:.3f}** | **{st[pv]:.3f}** | "
            f"**{d['total_rel_err'][pv]:+.1%}** | {st['concurrent_profile+prefill']:.3f} | "
            f"{d['total_rel_err']['concurrent_profile+prefill']:+.1%} | "
            f"{st['alone_profile+prefill']:.3f} | {st['median_all_profiles+prefill']:.3f} | | |")
    lines += ["", "Closed-loop `simulate`-style prediction (simulator makes its own plans):", ""]
    for pol, d in res["policies"].items():
        c = d["closed_loop_sim"]
        lines.append(f"- {pol}: steps {c['step_makespans_s']}, total {c['total_s']:.3f} s "
                     f"(live {d['live_total_s']:.3f} s, error {c['total_rel_err_vs_live']:+.1%})")
    lines += ["", "Profiles (tau in ms per decode step; b: value):", ""]
    summaries = [(mode, res["profiles"][mode]) for mode in ("concurrent", "sequential")]
    summaries += [(f"right before {pol}", d["fresh_profile"])
                  for pol, d in res["policies"].items()]
    for mode, summary in summaries:
        for s in summary["per_server"]:
            taus = ", ".join(f"{b}: {v * 1000:.2f}" for b, v in s["tau_s"].items())
            lines.append(f"- {mode} `{s['file']}`: {taus}; overhead b=1 "
                         f"{s['overhead_s']['1']:.3f} s")
    lines.append("")
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    given = [u for u in args.endpoints.split(",") if u]
    with Servers(given or None) as srv:
        res = asyncio.run(amain(args, srv.endpoints))
    res["servers_started_here"] = srv.started
    out = Path(args.out)
    out.write_text(json.dumps(res, indent=2) + "\n")
    write_markdown(res, out.with_suffix(".md"))
    pv = str(res["primary_variant"])
    pols: dict[str, Any] = res["policies"]
    for pol, d in pols.items():
        print(f"{pol}: live {d['live_total_s']:.3f} s, sim {d['sim_total_s'][pv]:.3f} s, "
              f"error {d['total_rel_err'][pv]:+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
