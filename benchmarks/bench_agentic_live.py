"""Agentic rollouts on a real engine: multi-turn trajectories with a scripted tool, live vs simulated.

::

    TAILSIEVE_REAL_ENDPOINTS=http://127.0.0.1:8610,http://127.0.0.1:8611 \\
    .venv/bin/python benchmarks/bench_agentic_live.py --policies verl-sticky,tailsieve \\
        --groups 4 --group-size 2 --steps 2 --out benchmarks/results/agentic_live

1. Servers: ``--endpoints`` (default ``$TAILSIEVE_REAL_ENDPOINTS``), or ``--emulate R``
   emulated replicas (a quick check of the code path).
2. Profile: the servers are measured in lockstep (``tailsieve profile``'s code path), then the
   time to first token (the per-request cost) and the prefill rate (distinct long prompts
   against short ones, seconds per prompt token): the profile the simulator runs on.
3. Live: ``--steps`` agentic steps of every ``--policies`` policy, interleaved (round t: step t
   of each policy, the order rotating), each policy through its own ``AgenticRollout`` (its
   gateway, router and balance gate). Each prompt is a chat prompt (a shared tool description,
   then a question asking for k tool calls); the scripted tool waits ``--tool-s`` seconds,
   appends an observation (chat-formatted, tokenized by the server) and ends the trajectory
   after k turns. A per-run marker at the start of every prompt keeps one run's prefix cache
   from serving another's.
4. Checks: every turn's prompt is exactly its context (``AgentTrajectory.check``), every piece's
   prompt as the server echoed it is exactly what was sent (vLLM ``prompt_token_ids``), and
   the turn recorder (``record.turn_recorder``) finds no context mismatch.
5. Figures per step: live step time; the agentic simulator's step time for the same recorded
   turns under the measured profile (``sim.agentic.run.simulate_policy``); prefix-cache hit
   rates from vLLM's own ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` (deltas
   over the step) and the simulator's; moves at turn boundaries and mid-turn.

Writes ``agentic_live.json``, ``agentic_live.md``, the profiles and the recorded turns
(``turns_<policy>.jsonl`` + ``.info.json``) under ``--out`` (default: the system temp dir).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import aiohttp
from outdir import default_out
from prometheus_client.parser import text_string_to_metric_families
from real_engine.profiles import measure
from real_engine.servers import Servers, loadavg, log, served_model

from tailsieve.model.prefill import PrefillModel
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.record.turn_recorder import TurnEvent, TurnRecorder
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.engine.transport import JSON, AiohttpTransport
from tailsieve.runtime.sessions import (
    AgenticBatch,
    AgenticConfig,
    AgenticRollout,
    GatewayConfig,
    ToolCall,
    ToolResult,
)
from tailsieve.sim.agentic.policies import policy_spec
from tailsieve.sim.agentic.run import simulate_policy

TOOLS = ("search(query): look a query up in the index and return the best passage; "
         "calc(expression): evaluate an arithmetic expression exactly; "
         "lookup(entity, field): read one field of an entity's record; ")
QUESTIONS = ("How tall is the tallest mountain in Europe, in meters?",
             "What is 17 times 23 plus 5?", "Which river flows through Vienna?",
             "When was the first transatlantic telegraph cable completed?",
             "What is the boiling point of water at 2,000 meters?",
             "How many moons does Neptune have?", "Who wrote The Name of the Rose?",
             "What is the square root of 1,764?")


class EchoCheck(AiohttpTransport):
    """Plain aiohttp transport that checks every completion's echoed prompt (vLLM
    ``prompt_token_ids``) against the token ids sent."""

    def __init__(self) -> None:
        super().__init__()
        self.num_checked = 0
        self.mismatches: list[str] = []

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        raw = await super().post_json(url, payload, timeout_s)
        sent = payload.get("prompt")
        if url.endswith("/v1/completions") and isinstance(sent, list | tuple):
            echo = (raw.get("choices") or [{}])[0].get("prompt_token_ids")
            self.num_checked += 1
            if echo is None or list(echo) != list(sent):
                self.mismatches.append(f"{url}: sent {len(sent)} tokens, echoed "
                                       f"{None if echo is None else len(echo)}")
        return raw


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=default_out("agentic_live"))
    p.add_argument("--endpoints", default=os.environ.get("TAILSIEVE_REAL_ENDPOINTS", ""))
    p.add_argument("--emulate", type=int, default=0, help="without --endpoints: emulated replicas")
    p.add_argument("--policies", default="verl-sticky,tailsieve")
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--max-turns", type=int, default=4, help="k of a prompt is 1..max-turns")
    p.add_argument("--max-tokens", type=int, default=48, help="per turn")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--piece-tokens", type=int, default=16, help="tailsieve's pieces")
    p.add_argument("--tool-s", type=float, default=0.3, help="seconds a tool call takes")
    p.add_argument("--tool-repeat", type=int, default=6, help="tool-description repeats")
    p.add_argument("--batch-sizes", default="1,2,4,8")
    p.add_argument("--profile-tokens", type=int, default=64)
    p.add_argument("--prefill-tokens", type=int, default=768, help="long prompt of the rate")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


async def prefill_rate(url: str, model: str, long_tokens: int, reps: int, seed: int) -> float:
    """Seconds per prompt token: 1-token requests with distinct (uncached) long prompts
    against short ones, medians of ``reps``."""
    rnd = random.Random(seed)

    async def latency(n: int) -> float:
        times = []
        async with aiohttp.ClientSession() as s:
            for _ in range(reps):
                body = {"model": model, "prompt": [rnd.randrange(1000, 20000) for _ in range(n)],
                        "max_tokens": 1, "ignore_eos": True}
                t0 = time.perf_counter()
                async with s.post(url + "/v1/completions", json=body) as r:
                    await r.read()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    short, long_ = await latency(16), await latency(long_tokens)
    return max(0.0, (long_ - short) / (long_tokens - 16))


async def cache_counts(urls: list[str]) -> tuple[float, float]:
    """(queries, hits) summed over the servers' ``vllm:prefix_cache_*`` counters."""
    q = h = 0.0
    async with aiohttp.ClientSession() as s:
        for u in urls:
            async with s.get(u + "/metrics") as r:
                text = await r.text()
            for fam in text_string_to_metric_families(text):
                for sm in fam.samples:
                    if sm.name == "vllm:prefix_cache_queries_total":
                        q += sm.value
                    elif sm.name == "vllm:prefix_cache_hits_total":
                        h += sm.value
    return q, h


async def cache_config(url: str) -> dict[str, str]:
    """vLLM's ``vllm:cache_config_info`` labels that matter here (prefix caching on, its block
    size); empty where the server has none (the emulator)."""
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    for fam in text_string_to_metric_families(text):
        for sm in fam.samples:
            if sm.name == "vllm:cache_config_info":
                return {k: sm.labels[k] for k in ("enable_prefix_caching", "block_size")
                        if k in sm.labels}
    return {}


async def make_prompts(ro: AgenticRollout, run: str, args: argparse.Namespace
                       ) -> tuple[list[PromptInput], dict[str, int]]:
    """Chat prompts as token ids (the server's chat template) and k (tool calls) of each."""
    prompts, k = [], {}
    for i in range(args.groups):
        want = 1 + (i % args.max_turns)
        msgs = [{"role": "system", "content": f"Run {run}. You are an agent. Tools: "
                 + TOOLS * args.tool_repeat},
                {"role": "user", "content": f"{QUESTIONS[i % len(QUESTIONS)]} Call a tool "
                 f"{want} times, one call per message, then answer."}]
        tok = await ro.tokenize_chat(msgs)
        prompts.append(PromptInput(f"q{i}", token_ids=tok))
        k[f"q{i}"] = want
    return prompts, k


def scripted_tool(ro: AgenticRollout, k: dict[str, int], tool_s: float) -> Any:
    async def tool(call: ToolCall) -> ToolResult:
        await asyncio.sleep(tool_s)
        if call.turn + 1 >= k[call.prompt_id]:
            return ToolResult(done=True)
        text = (f"<|im_end|>\n<|im_start|>user\nObservation {call.turn + 1}: the tool "
                f"returned result {7 * call.turn + call.sample} for your call.<|im_end|>\n"
                "<|im_start|>assistant\n")
        return ToolResult(observation_ids=await ro.tokenize(text))
    return tool


def record(rec: TurnRecorder, batch: AgenticBatch) -> None:
    for g in batch.groups:
        for tr in g.trajectories:
            for t, turn in enumerate(tr.turns):
                ids = turn.output.token_ids
                rec.add(TurnEvent(tr.prompt_id, tr.sample, t, max(1, len(ids)), turn.tool_s,
                                  len(turn.observation_ids), len(turn.prompt_ids),
                                  turn.output.finish_reason, batch.step,
                                  ids if ids else None))


async def live(args: argparse.Namespace, urls: list[str], model: str) -> dict[str, Any]:
    policies = [p for p in args.policies.split(",") if p]
    checks = EchoCheck()
    ros = {}
    for p in policies:
        gcfg = GatewayConfig(policy=p, piece_tokens=args.piece_tokens,
                             profile=str(args.out / "profile_sim.json"))
        cfg = AgenticConfig(group_size=args.group_size, max_turns=args.max_turns,
                            sampling=SamplingParams(max_tokens=args.max_tokens,
                                                    temperature=args.temperature),
                            model=model, gateway=gcfg)
        ros[p] = AgenticRollout(urls, cfg, transport=checks)
        await ros[p].__aenter__()
    recorders = {p: TurnRecorder() for p in policies}
    steps: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    batches: dict[str, list[AgenticBatch]] = {p: [] for p in policies}
    order = 0
    try:
        for rnd in range(args.steps):
            for j in range(len(policies)):
                p = policies[(rnd + j) % len(policies)]
                ro = ros[p]
                prompts, k = await make_prompts(ro, f"{p}-{rnd}-{args.seed}", args)
                q0, h0 = await cache_counts(urls)
                log(f"round {rnd}: {p}")
                batch = await ro.run(prompts, scripted_tool(ro, k, args.tool_s))
                q1, h1 = await cache_counts(urls)
                record(recorders[p], batch)
                batches[p].append(batch)
                st = batch.stats
                steps[p].append({
                    "step": batch.step, "run_order": order, "loadavg": loadavg(),
                    "live_step_s": round(batch.step_s, 4), "mid_turn_moves": batch.mid_turn_moves,
                    "num_turns": batch.num_turns, "vllm_prefix_queries": q1 - q0,
                    "vllm_prefix_hits": h1 - h0,
                    "vllm_hit_rate": (h1 - h0) / (q1 - q0) if q1 > q0 else 0.0,
                    "gateway": {k_: v for k_, v in asdict(st).items() if k_ != "replicas"},
                    "turns_per_trajectory": [len(t.turns) for g in batch.groups
                                             for t in g.trajectories],
                })
                order += 1
    finally:
        for ro in ros.values():
            await ro.__aexit__(None, None, None)
        await checks.aclose()
    out: dict[str, Any] = {"policies": {}, "pieces_checked": checks.num_checked,
                           "echo_mismatches": checks.mismatches}
    for p in policies:
        recording = recorders[p].recording({"benchmark": "bench_agentic_live.py",
                                            "policy": p, "model": model})
        recording.write(args.out / f"turns_{p}.jsonl")
        out["policies"][p] = {"steps": steps[p],
                              "context_mismatches": recording.info["context_mismatches"]}
    out["batches"] = batches
    return out


def simulate(res: dict[str, Any], configs: list[ReplicaConfig], seed: int) -> None:
    """The agentic simulator on each policy's recorded steps (its own gate and routers)."""
    for p, d in res["policies"].items():
        trajs = [list(b.turn_trace().trajectories) for b in res["batches"][p]]
        sims = simulate_policy(trajs, configs, policy_spec(p), seed)
        for row, s in zip(d["steps"], sims, strict=True):
            assert s is not None
            row["sim_step_s"] = round(s.step_s, 4)
            row["sim_over_live"] = round(s.step_s / row["live_step_s"], 4)
            row["sim"] = {"hit_rate": s.hit_rate, "boundary_moves": s.boundary_moves,
                          "midturn_moves": s.midturn_moves,
                          "reprefilled_tokens": s.reprefilled_tokens, "moves_on": s.moves_on}
        d["live_mean_step_s"] = statistics.fmean(r["live_step_s"] for r in d["steps"])
        d["sim_mean_step_s"] = statistics.fmean(r["sim_step_s"] for r in d["steps"])


def markdown(res: dict[str, Any]) -> str:
    lines = ["| policy | step | live s | simulated s | sim/live | vLLM hit rate | sim hit rate "
             "| moves (boundary / mid-turn) | turns |", "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for p, d in res["policies"].items():
        for r in d["steps"]:
            g = r["gateway"]
            lines.append(f"| {p} | {r['step']} | {r['live_step_s']:.2f} | {r['sim_step_s']:.2f} | "
                         f"{r['sim_over_live']:.2f} | {r['vllm_hit_rate']:.2f} | "
                         f"{r['sim']['hit_rate']:.2f} | {g['moves_at_boundary']} / "
                         f"{g['moves_mid_turn']} | {r['num_turns']} |")
    lines.append("")
    lines.append(f"Pieces whose echoed prompt was checked: {res['pieces_checked']} "
                 f"({len(res['echo_mismatches'])} mismatches); turns whose prompt was checked "
                 f"against their context: {res['turns_checked']} (context mismatches: "
                 f"{res['context_mismatches']}).")
    return "\n".join(lines) + "\n"


async def amain(args: argparse.Namespace, urls: list[str]) -> dict[str, Any]:
    model, max_len = await served_model(urls[0])
    caching = [await cache_config(u) for u in urls]
    bs = tuple(int(b) for b in args.batch_sizes.split(","))
    prof = await measure(urls, model, bs, args.profile_tokens, 1, args.repeats, "before",
                         args.out)
    rate = await prefill_rate(urls[0], model, args.prefill_tokens, args.repeats, args.seed)
    tp = replace(prof.mean_model(), prefill=PrefillModel(rate))
    tp.save(args.out / "profile_sim.json")
    res = await live(args, urls, model)
    configs = [ReplicaConfig.from_profile(tp, prefill_s=prof.prefill_s,
                                          prefill_s_per_token="profile")] * len(urls)
    simulate(res, configs, args.seed)
    batches = res.pop("batches")
    res["turns_checked"] = sum(b.num_turns for bl in batches.values() for b in bl)
    res["context_mismatches"] = sum(len(d["context_mismatches"])
                                    for d in res["policies"].values())
    res.update({"model": model, "max_model_len": max_len, "endpoints": urls,
                "cache_config": caching,
                "profile": prof.summary(), "prefill_s_per_token": rate,
                "args": {k: str(v) for k, v in vars(args).items()}})
    return res


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    urls = [u for u in args.endpoints.split(",") if u]
    with Servers(urls, emulate=args.emulate, log_dir=args.out) as servers:
        res = asyncio.run(amain(args, servers.endpoints))
    (args.out / "agentic_live.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "agentic_live.md").write_text(markdown(res))
    print(markdown(res))
    return 0 if not res["echo_mismatches"] and not res["context_mismatches"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
