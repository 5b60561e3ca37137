"""The simulator's prediction of the live steps, the profiling drift and the policy ordering."""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from typing import Any

from real_engine.live import LiveStep, outcome_dict, plan_dict
from real_engine.profiles import Profiled, bracket
from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.step.replay import ReplayLengths
from tailsieve.sim.executor import SimExecutor
from tailsieve.sim.movepath import PieceSettings
from tailsieve.sim.replicas import PoolConfigs

PRIMARY = "profile"  # the one profile, measured before the live steps, + measured prefill
AFTER = "profile_after"  # the same measurement repeated after the live steps (drift)
NO_PREFILL = "profile,no_prefill"
BRACKET = "profile_bracket"  # each round from the mean of the profiles measured around it
JUDGED = BRACKET  # the prediction the errors and the ordering check are judged on


def sim_pools(model: ThroughputModel, prefill_s: float) -> PoolConfigs:
    return PoolConfigs.single(ReplicaConfig(throughput=model, prefill_s=prefill_s))


def replay_sim(live: list[LiveStep], pools: PoolConfigs | list[PoolConfigs],
               lengths: ReplayLengths, n: int,
               pieces: PieceSettings | None = None) -> list[StepOutcome]:
    """The simulator on exactly the live plans and lengths (``pools``: one for every step, or
    one per step). A plan with balance settings runs with the simulator's own moves, in
    ``pieces`` as the live lane ran them."""
    per_step = pools if isinstance(pools, list) else [pools] * len(live)
    return [SimExecutor(pc, pieces=pieces).run(
        s.plan, lambda pid, _st: [lengths(pid, j) for j in range(n)])
        for s, pc in zip(live, per_step, strict=True)]


def bracket_pools(live: list[LiveStep], profiles: list[Profiled]) -> list[PoolConfigs]:
    """Per step: the mean of the two profiles measured around its round (``profiles`` in time
    order: before, after each round but the last when profiled between rounds, after)."""
    cache: dict[int, PoolConfigs] = {}
    out = []
    for s in live:
        i = min(s.round, len(profiles) - 2)
        if i not in cache:
            model, pre = bracket(profiles[i:i + 2], f"real-mean-bracket-{i}")
            cache[i] = sim_pools(model, pre)
        out.append(cache[i])
    return out


def closed_loop_sim(policy: str, pools: PoolConfigs, profile: ThroughputModel,
                    lengths: ReplayLengths, prompt_ids: list[str], groups: int, n: int,
                    num_replicas: int, steps: int,
                    controller: dict[str, Any] | None = None,
                    moves: bool = False,
                    pieces: PieceSettings | None = None) -> list[StepOutcome]:
    """``tailsieve simulate``-style: the protocol and its controller driven by the simulator
    (its own plans), same prompt order and lengths, then a flush if anything is carried.
    Without ``moves`` a plan's balance settings are dropped (the live lane could not move)."""
    ccfg = ControllerConfig(num_groups=groups, num_replicas=num_replicas, group_size=n,
                            **(controller or {}))
    proto = RolloutProtocol(
        ProtocolConfig(num_replicas=num_replicas, num_groups=groups, group_size=n),
        make_controller(policy, ccfg, profile),
    )
    stream = PromptStream(iter(prompt_ids))
    ex = SimExecutor(pools, pieces=pieces if moves else None)
    out: list[StepOutcome] = []
    for i in range(steps + 1):
        if i == steps and not proto.candidates:
            break
        plan = proto.plan_step(stream, flush=i == steps)
        as_run = plan if moves else dataclasses.replace(plan, balance=None)
        o = ex.run(as_run, lambda pid, _st: [lengths(pid, j) for j in range(n)])
        proto.update_from_outcome(plan, o)
        out.append(o)
    return out


def rel_err(sim: float, live: float) -> float:
    return (sim - live) / live if live > 0 else float("nan")


def policy_result(ls: list[LiveStep], profiles: list[Profiled], lengths: ReplayLengths,
                  n: int, closed: list[StepOutcome],
                  pieces: PieceSettings | None = None) -> dict[str, Any]:
    """Per step and in total: live, simulated from the one profile measured before the live
    steps (the controllers' profile), from the profile measured after them, from the profiles
    bracketing each round (judged), and without prefill; mean step over the regular steps."""
    before, after = profiles[0], profiles[-1]
    model = before.mean_model()
    variants: dict[str, PoolConfigs | list[PoolConfigs]] = {
        PRIMARY: sim_pools(model, before.prefill_s),
        AFTER: sim_pools(after.mean_model(), after.prefill_s),
        BRACKET: bracket_pools(ls, profiles),
        NO_PREFILL: sim_pools(model, 0.0)}
    sims = {k: replay_sim(ls, v, lengths, n, pieces) for k, v in variants.items()}
    rows: list[dict[str, Any]] = []
    for i, s in enumerate(ls):
        live = s.outcome.makespan_s
        rows.append({
            "step": s.plan.step, "q": s.plan.q, "m": s.plan.m, "is_flush": s.plan.is_flush,
            "live_makespan_s": round(live, 4),
            "live_tail_time_s": round(s.outcome.tail_time_s, 4),
            "live_bulk_cut_s": round(s.outcome.bulk_cut_s, 4),
            "live_wall_s": round(s.wall_s, 4),
            "run_order": s.seq,
            "round": s.round,
            "live_moves": s.num_moves,
            "live_moved_tokens": s.moved_tokens,
            "live_moves_effective": s.num_effective,
            "sim_moves": sims[JUDGED][i].num_moves,
            "sim_makespan_s": {k: round(v[i].makespan_s, 4) for k, v in sims.items()},
            "rel_err": {k: round(rel_err(v[i].makespan_s, live), 4) for k, v in sims.items()},
            "loadavg": s.loadavg,
            "plan": plan_dict(s.plan),
            "live_outcome": outcome_dict(s.outcome),
            "sim_outcome": outcome_dict(sims[JUDGED][i]),
        })
    reg = [i for i, s in enumerate(ls) if not s.plan.is_flush]
    live_mean = statistics.fmean(ls[i].outcome.makespan_s for i in reg)
    sim_mean = {k: statistics.fmean(v[i].makespan_s for i in reg) for k, v in sims.items()}
    live_total = sum(s.outcome.makespan_s for s in ls)
    sim_total = {k: sum(o.makespan_s for o in v) for k, v in sims.items()}
    errs = [r["rel_err"][JUDGED] for r in rows]
    return {
        "steps": rows,
        "num_regular_steps": len(reg),
        "live_mean_step_s": round(live_mean, 4),
        "sim_mean_step_s": {k: round(v, 4) for k, v in sim_mean.items()},
        "mean_step_rel_err": {k: round(rel_err(v, live_mean), 4) for k, v in sim_mean.items()},
        "live_total_s": round(live_total, 4),
        "sim_total_s": {k: round(v, 4) for k, v in sim_total.items()},
        "total_rel_err": {k: round(rel_err(v, live_total), 4) for k, v in sim_total.items()},
        "step_rel_err_range": [round(min(errs), 4), round(max(errs), 4)],
        "drift_rel": round(rel_err(sim_mean[AFTER], sim_mean[PRIMARY]), 4),
        "closed_loop_sim": {
            "step_makespans_s": [round(o.makespan_s, 4) for o in closed],
            "total_s": round(sum(o.makespan_s for o in closed), 4),
            "total_rel_err_vs_live": round(rel_err(sum(o.makespan_s for o in closed),
                                                   live_total), 4),
        },
    }


def placements(d: dict[str, Any]) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Every step's groups and the replica of each response: equal for two policies that ran
    exactly the same plans (then their live difference is noise, and the simulator predicts a
    tie)."""
    return [[(a["prompt_id"], tuple(a["replicas"]), r["plan"].get("balance", False))
             for a in r["plan"]["assignments"]] for r in d["steps"]]


def ordering(policies: dict[str, Any], drift: float) -> list[dict[str, Any]]:
    """Every pair of policies: their live and simulated mean-step difference (relative to the
    second), whether the live difference exceeds the drift, whether they ran identical plans,
    and whether the simulator orders them as live did (None for identical plans: a tie)."""
    out: list[dict[str, Any]] = []
    for a, b in itertools.combinations(policies, 2):
        same_plans = placements(policies[a]) == placements(policies[b])
        la, lb = policies[a]["live_mean_step_s"], policies[b]["live_mean_step_s"]
        sa, sb = (policies[a]["sim_mean_step_s"][JUDGED],
                  policies[b]["sim_mean_step_s"][JUDGED])
        live_d, sim_d = rel_err(la, lb), rel_err(sa, sb)
        out.append({
            "pair": [a, b],
            "live_diff_rel": round(live_d, 4),
            "sim_diff_rel": round(sim_d, 4),
            "exceeds_drift": abs(live_d) > drift,
            "identical_plans": same_plans,
            "same_order": None if same_plans else (live_d > 0) == (sim_d > 0),
        })
    return out


def summarize_ordering(res: dict[str, Any]) -> None:
    """(Re)derive ``ordering``, ``ordering_ok`` and ``live_noise`` from the recorded steps: the
    ordering must be right for every pair of different plans whose live difference exceeds the
    drift; ``live_noise`` is the largest live difference between two policies that ran the very
    same plans (None when no two did)."""
    pairs = ordering(res["policies"], res["drift"])
    res["ordering"] = pairs
    res["ordering_ok"] = all(o["same_order"] for o in pairs
                             if o["exceeds_drift"] and not o["identical_plans"])
    same = [abs(o["live_diff_rel"]) for o in pairs if o["identical_plans"]]
    res["live_noise"] = max(same) if same else None
