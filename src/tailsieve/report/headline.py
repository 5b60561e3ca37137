"""The result of a run in words: speedup over the baseline a user already has (per-request
round-robin, ``uniform-requests``, when the run holds it) and over Uniform, each with a 95%
interval, step times, tokens wasted, final q and m; each rollout speedup with the training step's
speedup at a stated rollout share of the step (``core.training_step``). Pure functions of
``RunData`` (no I/O); the HTML report prints them first.

The speedup is paired: the same step number of two policies ran the same fresh prompts and (in
replay) the same lengths, so the interval resamples *steps* (a percentile bootstrap of
``sum(reference) / sum(policy)`` over the steps after the warm-up, seeded, 2,000 draws).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tailsieve.core.training_step import (
    DEFAULT_ROLLOUT_SHARE,
    check_rollout_share,
    step_speedup,
)
from tailsieve.report.run_data import RunData
from tailsieve.sim.speedup_stats import STEADY_FROM

BOOTSTRAP_DRAWS = 2000
REFERENCE = "uniform"
USER_BASELINE = "uniform-requests"  # what a per-request load balancer already does
DISPLAY_NAMES = {"uniform": "Uniform", "uniform-requests": "per-request round-robin",
                 "tailsieve": "TailSieve", "tailsieve-fixed": "TailSieve (split held)",
                 "tailsieve-static": "TailSieve (q, m held)"}


def display_name(policy: str) -> str:
    """How a policy is named in sentences (``tailsieve`` -> ``TailSieve``)."""
    return DISPLAY_NAMES.get(policy, policy)


@dataclass(frozen=True, slots=True)
class PairedSpeedup:
    """A reference policy's total step time over a policy's, on the steady steps both ran
    (from ``STEADY_FROM``, as the demo's table and the simulator's paired statistic, when at
    least 3 are common; else every step after the warm-up)."""

    policy: str
    reference: str  # the policy compared against (``uniform`` unless asked otherwise)
    num_steps: int  # paired steps
    first_step: int  # the first of them
    speedup: float  # sum(reference) / sum(policy)
    low: float | None  # 95% interval (None with fewer than 3 paired steps)
    high: float | None
    reference_mean_s: float
    policy_mean_s: float


@dataclass(frozen=True, slots=True)
class PolicyFacts:
    """What the headline says about one policy."""

    policy: str
    mean_step_s: float | None  # steps after the warm-up, flush excluded
    steady_step_s: float | None  # from the summary (last 3 steps) when present
    wasted_fraction: float | None  # wasted / generated tokens
    wasted_tokens: int | None
    final_q: int | None
    final_m: int | None
    num_replicas: int | None
    waste_split: dict[str, int] | None = None  # live runs: WASTE_PARTS summed over the steps


WASTE_PARTS = ("cutoff_wasted_tokens", "cutoff_estimated_tokens", "cutoff_max_tokens",
               "lost_exact_tokens", "lost_estimated_tokens", "lost_estimated_max_tokens")
"""The live step records' split of ``wasted_tokens`` (``StepMetrics``, ``core.outcome.WasteSplit``)."""


def _regular(recs: list[dict[str, Any]]) -> dict[int, float]:
    """step -> makespan of the regular steps after the warm-up (flush excluded)."""
    return {
        int(r["step"]): float(r["makespan_s"])
        for r in recs
        if not r.get("is_flush") and int(r.get("step", 0)) > 0 and "makespan_s" in r
    }


def paired_speedup(
    run: RunData, policy: str, seed: int = 0, draws: int = BOOTSTRAP_DRAWS,
    reference: str = REFERENCE,
) -> PairedSpeedup | None:
    """``policy`` against ``reference`` on their common steps; None if either is missing."""
    if reference not in run.steps or policy not in run.steps or policy == reference:
        return None
    u, p = _regular(run.steps[reference]), _regular(run.steps[policy])
    common = sorted(set(u) & set(p))
    if not common:
        return None
    steady = [s for s in common if s >= STEADY_FROM]
    if len(steady) >= 3:
        common = steady
    us = np.array([u[s] for s in common])
    ps = np.array([p[s] for s in common])
    if ps.sum() <= 0:
        return None
    low = high = None
    if len(common) >= 3:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(common), size=(draws, len(common)))
        ratios = us[idx].sum(axis=1) / ps[idx].sum(axis=1)
        low, high = (float(x) for x in np.percentile(ratios, [2.5, 97.5]))
    return PairedSpeedup(
        policy, reference, len(common), common[0], float(us.sum() / ps.sum()), low, high,
        float(us.mean()), float(ps.mean()),
    )


def policy_facts(run: RunData, policy: str) -> PolicyFacts:
    recs = [r for r in run.steps.get(policy, []) if not r.get("is_flush")]
    summary = next((s for s in run.summaries if s.get("policy") == policy), {})
    regular = _regular(run.steps.get(policy, []))
    every = run.steps.get(policy, [])
    gen = sum(int(r.get("generated_tokens", 0)) for r in every)
    wasted = sum(int(r.get("wasted_tokens", 0)) for r in every)
    has_tokens = any("generated_tokens" in r for r in every)
    frac = summary.get("wasted_token_fraction")
    if frac is None and has_tokens and gen:
        frac = wasted / gen
    replicas = run.settings.get("replicas")
    split = None
    if every and all(WASTE_PARTS[0] in r for r in every):
        split = {k: sum(int(r.get(k, 0)) for r in every) for k in WASTE_PARTS}
    return PolicyFacts(
        policy=policy,
        mean_step_s=float(np.mean(list(regular.values()))) if regular else summary.get(
            "mean_step_s"),
        steady_step_s=summary.get("steady_step_s"),
        wasted_fraction=None if frac is None else float(frac),
        wasted_tokens=wasted if has_tokens else None,
        waste_split=split,
        final_q=int(recs[-1]["q"]) if recs and "q" in recs[-1] else None,
        final_m=int(recs[-1]["m"]) if recs and "m" in recs[-1] else None,
        num_replicas=int(replicas) if isinstance(replicas, int) else None,
    )


def main_policy(run: RunData) -> str | None:
    """The policy the headline is about: ``tailsieve`` if present, else the first other one."""
    names = list(dict.fromkeys([*run.steps, *(s.get("policy") for s in run.summaries)]))
    names = [n for n in names if isinstance(n, str)]
    if "tailsieve" in names:
        return "tailsieve"
    others = [n for n in names if n != REFERENCE]
    return others[0] if others else (names[0] if names else None)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def time_unit(run: RunData) -> str:
    """The unit of the run's step times: a demo runs emulated replicas (emulated seconds,
    ``time_scale`` of the modelled ones), ``simulate`` models them, a rollout or a demo on real
    servers (``--real-model``, ``--endpoints``) measures them."""
    if run.kind == "demo" and "served_model_name" not in run.settings:
        return "emulated s"
    if run.kind == "simulate":
        return "modelled s"
    return "s"


def _s(x: float | None, unit: str = "s") -> str:
    return "n/a" if x is None else f"{x:.2f} {unit}"


def _speedup_sentence(name: str, sp: PairedSpeedup, unit: str, rollout_share: float) -> str:
    ci = (
        f" (95% interval {sp.low:.3f}x to {sp.high:.3f}x over {sp.num_steps} paired steps)"
        if sp.low is not None and sp.high is not None
        else f" ({sp.num_steps} paired steps: too few for an interval)"
    )
    ref = display_name(sp.reference)
    how = (
        f"{sp.speedup:.3f}x faster than {ref}"
        if sp.speedup >= 1
        else f"slower than {ref}, speedup {sp.speedup:.3f}x"
    )
    return (
        f"{name} was {how}{ci}: a mean step of {_s(sp.policy_mean_s, unit)} against "
        f"{_s(sp.reference_mean_s, unit)} on the same prompts ({_from(sp.first_step)}). "
        f"{training_step_words(sp.speedup, rollout_share)}"
    )


def training_step_words(rollout_speedup: float, rollout_share: float) -> str:
    """The training step's speedup that a rollout speedup gives at ``rollout_share``."""
    step = step_speedup(rollout_speedup, rollout_share)
    return (f"Where the rollout is {100 * rollout_share:.0f}% of a training step "
            f"(--rollout-share), a {rollout_speedup:.3f}x rollout makes the training step "
            f"{step:.3f}x.")


def _from(first_step: int) -> str:
    if first_step <= 1:
        return "warm-up step excluded"
    return f"from step {first_step}: the warm-up and the controller's first steps excluded"


def headline_sentences(run: RunData, rollout_share: float = DEFAULT_ROLLOUT_SHARE) -> list[str]:
    """The headline as a few plain sentences (HTML-free): first against the baseline a user
    already has (``uniform-requests``) when the run holds it, then against Uniform; each
    speedup with the training step's at ``rollout_share`` of the step."""
    check_rollout_share(rollout_share)
    pol = main_policy(run)
    if pol is None:
        return ["This run holds no step records to summarise."]
    facts = policy_facts(run, pol)
    name = display_name(pol)
    out: list[str] = []
    unit = time_unit(run)
    pairs = [paired_speedup(run, pol, reference=ref) for ref in (USER_BASELINE, REFERENCE)]
    found = [sp for sp in pairs if sp is not None]
    for sp in found:
        out.append(_speedup_sentence(name, sp, unit, rollout_share))
    if found:
        ref = policy_facts(run, found[0].reference)
        if facts.steady_step_s is not None and ref.steady_step_s is not None:
            out.append(
                f"Steady state (mean of the last 3 steps): {_s(facts.steady_step_s, unit)} "
                f"against {_s(ref.steady_step_s, unit)} ({display_name(ref.policy)})."
            )
    else:
        out.append(f"{name}: mean step time {_s(facts.mean_step_s, unit)} after the warm-up "
                   "step.")
    if facts.wasted_fraction is not None:
        out.append(waste_sentence(facts, run.kind))
    if facts.final_m == 0 and pol not in (REFERENCE, USER_BASELINE):
        out.append("It ended in balance (m = 0: no tail pool; with spread dealing, the default, "
                   "each group's responses run over all replicas).")
    elif facts.final_q is not None and facts.final_m is not None:
        of = f" of {facts.num_replicas}" if facts.num_replicas else ""
        out.append(
            f"It ended with q = {facts.final_q} tail groups on m = {facts.final_m}{of} replicas."
        )
    return out


def waste_sentence(facts: PolicyFacts, kind: str) -> str:
    """What the wasted tokens were, in words. A live run's records split them three ways,
    each with its bound: tokens of groups aborted at the cutoff, tokens decoded again after a
    fault or a move counted exactly (streamed, or finished), and those estimated (unstreamed:
    rate x elapsed, at most each piece's cap). The simulator counts every token exactly."""
    tokens = f" ({facts.wasted_tokens:,} tokens)" if facts.wasted_tokens is not None else ""
    head = f"Tokens wasted: {_pct(facts.wasted_fraction)} of all generated tokens{tokens}"
    w = facts.waste_split
    if w is None:
        how = "counted exactly by the simulator" if kind == "simulate" else "not split"
        return (f"{head}, on groups aborted at the cutoff and on responses decoded again after "
                f"a move or a fault ({how}).")
    cut = f"{w['cutoff_wasted_tokens']:,} on groups aborted at the cutoff"
    if w["cutoff_estimated_tokens"]:
        cut += (f" ({w['cutoff_estimated_tokens']:,} of them estimated; at most "
                f"{w['cutoff_max_tokens']:,})")
    lost = (f"{w['lost_exact_tokens']:,} decoded again after a fault or a move, counted "
            f"exactly, and {w['lost_estimated_tokens']:,} estimated (at most "
            f"{w['lost_estimated_max_tokens']:,})")
    return f"{head}: {cut}; {lost}."
