"""``simulate(...)``: the Python face of ``tailsieve simulate`` (paired multi-step simulation).

::

    from tailsieve import simulate
    result = simulate("paper-math", policies=["uniform", "tailsieve"], steps=20, seed=0)
    result.speedup("tailsieve")          # uniform's steady step time / tailsieve's
    result.summaries["tailsieve"]        # the row ``tailsieve simulate --json`` prints
    result.fluid_bound_s()               # the fluid perfect-balance bound of those batches
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.speculative import SpecConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.sim.driver import (
    ALL_POLICIES,
    KNOWN_POLICIES,
    ProtocolRun,
    SimSettings,
    epoch_prompt_ids,
    run_policies,
)
from tailsieve.sim.movepath import PieceSettings
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.speedup_stats import CI_METHOD, STEADY_FROM, SpeedupStat, speedup_table
from tailsieve.sim.workloads import resolve_workload


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """Per-policy summaries (paired against ``uniform``) and the runs behind them."""

    settings: dict[str, Any]  # what was simulated
    summaries: dict[str, dict[str, Any]]  # policy -> steady/mean step s, speedups, q, m, ...
    runs: dict[str, ProtocolRun]  # policy -> step records (+ a timeline for protocol runs)

    def speedup(self, policy: str = "tailsieve", steady: bool = True) -> float:
        """Uniform's step time over ``policy``'s: steady (last 3 steps) or mean over steps
        1..S-1 (``steady=False``)."""
        if policy not in self.summaries:
            raise ConfigError(f"policy {policy!r} was not simulated; have {list(self.summaries)}")
        key = "speedup_vs_uniform" if steady else "mean_speedup_vs_uniform"
        value = self.summaries[policy][key]
        if value is None:
            raise ConfigError(f"no speedup for {policy!r}: a step time was zero")
        return float(value)

    def fluid_bound_s(self, policy: str = "uniform", steady: bool = True) -> float:
        """The fluid perfect-balance bound (``oracle.fluid_bound``) of the batches ``policy``
        delivered: the mean of the last 3 regular steps (pairs with the steady step time) or,
        with ``steady=False``, the sum over the regular steps. The baselines deliver the same
        batches, so theirs is one number; no placement, moves at zero cost included, beats it."""
        if policy not in self.summaries:
            raise ConfigError(f"policy {policy!r} was not simulated; have {list(self.summaries)}")
        key = "steady_fluid_bound_s" if steady else "fluid_bound_total_s"
        return float(self.summaries[policy][key])

    def to_dict(self) -> dict[str, Any]:
        """Settings + a list of summaries (``tailsieve simulate --json`` adds ``diagnostics``)."""
        return {"settings": dict(self.settings), "policies": list(self.summaries.values())}

    def diagnostics(self) -> dict[str, list[dict[str, Any]]]:
        """Per policy, each step's diagnostics (``core.diagnostics``) where it has them."""
        return {name: [d for rec in r.run.records if (d := rec.diagnostics_dict()) is not None]
                for name, r in self.runs.items()}

    def write(self, folder: Path) -> Path:
        """Write ``folder/simulate.json`` (settings, summaries and every step record, the file
        ``tailsieve report`` reads); returns its path."""
        folder.mkdir(parents=True, exist_ok=True)
        data = {
            **self.to_dict(),
            "steps": {name: [rec.to_dict() for rec in r.run.records]
                      for name, r in self.runs.items()},
        }
        path = folder / "simulate.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        return path

    def plot(self, folder: Path) -> list[Path]:
        """Write PNG plots into ``folder``: step times, the controller's trajectory, and each
        protocol run's timeline; returns their paths."""
        from tailsieve.sim.plots import plot_timeline, q_m_figure, steps_figure
        from tailsieve.workload.plots import save

        folder.mkdir(parents=True, exist_ok=True)
        steps = {name: [rec.to_dict() for rec in r.run.records] for name, r in self.runs.items()}
        figures = {"step_times": steps_figure(steps), "controller": q_m_figure(steps, empty=True)}
        paths = [save(fig, folder / f"{name}.png") for name, fig in figures.items() if fig]
        for name, r in self.runs.items():
            if r.timeline is not None:
                paths.append(plot_timeline(r.timeline, int(self.settings["replicas"]), name,
                                           folder / f"timeline_{name}.png"))
        return paths


def simulate(
    workload: str = "paper-math",
    *,
    policies: Sequence[str] | None = None,
    replicas: int = 8,
    groups: int = 64,
    group_size: int = 8,
    steps: int = 20,
    profile: str = DEFAULT_PROFILE,
    seed: int = 0,
    seeds: int = 1,
    q0: int | None = None,
    m0: int | None = None,
    spread: bool = True,
    tail_strength: str | None = None,
    tail_spec: str = "none",
    bulk_spec: str = "none",
    max_num_seqs: int | None = None,
    kv_capacity_tokens: int | None = None,
    prefill_s: float = 0.0,
    num_prompts: int = 1000,
    piece_tokens: int | None = None,
    piece_seam_s: float = 0.05,
    piece_moves: Literal["defer", "drop"] = "defer",
    stream_interval: int | None = None,
    drain_lpt: bool = True,
    drain_priority: bool = False,
) -> SimulationResult:
    """Simulate ``policies`` (default: all of ``tailsieve simulate``; ``uniform`` is always
    added as the paired reference) on the same prompts and response lengths.

    ``workload``: a preset (``paper-math``, ``aime-r1``), ``aime`` (the shipped AIME trace,
    resampled), ``smollm2-math`` (the shipped SmolLM2 trace, its two epochs replayed) or a
    trace file. ``max_num_seqs`` / ``kv_capacity_tokens``: None takes the
    profile's (0 switches the cap off). ``spread``: protocol policies deal single responses
    over a pool's replicas (False: whole groups, as the paper). ``seeds``: seeds
    ``seed .. seed+seeds-1`` are simulated for each summary's ``paired_stat`` (mean per-step
    ratio with its 95% interval over seeds); summaries and runs are the first seed's.
    ``piece_tokens``: moved responses run as pieces of at most this many tokens, each piece end
    costing ``piece_seam_s`` (how the live runtime knows where a response stands; None: one
    piece until moved, the cost-free ideal); ``piece_moves``: a move waits for the running
    piece's end (``defer``) or drops it (``drop``). ``stream_interval``: responses streamed in
    chunks of this many tokens (vLLM's ``stream_interval``; no pieces): a move happens at once
    and keeps the tokens streamed, the rest decoded again. ``drain_lpt`` / ``drain_priority``:
    the single-turn drain's levers (``core.drain``: LPT moves by expected remaining tokens,
    on by default; engine priority by tokens generated, vLLM's priority policy, off). The
    other arguments mirror the CLI
    options of the same names.
    """
    if piece_moves not in ("defer", "drop"):
        raise ConfigError(f"piece_moves must be 'defer' or 'drop', got {piece_moves!r}")
    if piece_seam_s < 0:
        raise ConfigError(f"piece_seam_s must be >= 0, got {piece_seam_s}")
    if seeds < 1:
        raise ConfigError(f"seeds must be >= 1, got {seeds}")
    if stream_interval is not None and piece_tokens is not None:
        raise ConfigError("give piece_tokens (unstreamed pieces) or stream_interval, not both")
    pieces = None if piece_tokens is None else PieceSettings(
        piece_tokens, piece_seam_s, defer_moves=piece_moves == "defer")
    if stream_interval is not None:
        pieces = PieceSettings.streamed(stream_interval)
    names = list(policies) if policies else list(ALL_POLICIES)
    for name in names:
        if name not in KNOWN_POLICIES:
            raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(KNOWN_POLICIES)}")
    if "uniform" not in names:
        names.insert(0, "uniform")  # the paired reference
    settings = SimSettings(
        num_replicas=replicas, num_groups=groups, group_size=group_size, num_steps=steps,
        seed=seed, q0=q0, m0=m0, spread=spread,
        pieces=pieces, drain_lpt=drain_lpt, drain_priority=drain_priority,
    )
    base = replica_config(load_profile(profile), max_num_seqs, kv_capacity_tokens, prefill_s)
    pools = PoolConfigs.from_specs(base, SpecConfig.parse(tail_spec), SpecConfig.parse(bulk_spec))
    all_runs = []
    for sd in range(seed, seed + seeds):
        wl = resolve_workload(workload, tail_strength, seed=sd, num_prompts=num_prompts)
        dataset = wl.prompt_ids()
        all_runs.append(run_policies(names, replace(settings, seed=sd),
                                     partial(epoch_prompt_ids, dataset, sd), wl, pools))
    runs = all_runs[0]
    uniform = runs["uniform"].run
    stats = _paired_stats(all_runs)
    summaries = {}
    for name, r in runs.items():
        summ = r.run.summary(uniform)
        st = stats.get(name)
        summ["paired_stat"] = st.to_dict() if st is not None else None
        summaries[name] = summ
    meta: dict[str, Any] = {
        "workload": workload, "tail_strength": tail_strength or "real", "replicas": replicas,
        "groups": groups, "group_size": group_size, "steps": steps, "profile": profile,
        "seed": seed, "seeds": seeds, "tail_spec": tail_spec, "bulk_spec": bulk_spec,
        "q0": q0, "m0": m0, "spread": spread,
        "max_num_seqs": base.max_num_seqs, "kv_capacity_tokens": base.kv_capacity_tokens,
        "prefill_s": prefill_s, "recompute_s_per_token": base.recompute_s_per_token,
        "piece_tokens": piece_tokens, "piece_seam_s": piece_seam_s if piece_tokens else None,
        "piece_moves": piece_moves if piece_tokens else None, "stream_interval": stream_interval,
        "drain_lpt": drain_lpt, "drain_priority": drain_priority,
        "recompute_s_per_token_pair": base.recompute_s_per_token_pair,
        "paired_steady_from": STEADY_FROM, "paired_interval": CI_METHOD,
    }
    return SimulationResult(meta, summaries, runs)


def replica_config(
    model: ThroughputModel, max_num_seqs: int | None, kv_capacity: int | None, prefill_s: float
) -> ReplicaConfig:
    """The replica of ``model`` with overrides: None keeps the profile's value, 0 switches
    the cap off."""
    for flag, v in (("max_num_seqs", max_num_seqs), ("kv_capacity", kv_capacity)):
        if v is not None and v < 0:
            raise ConfigError(f"{flag} must be >= 0 (0 = off), got {v}")
    seqs: int | Literal["profile"] | None = "profile" if max_num_seqs is None else (
        max_num_seqs or None)
    cap: int | Literal["profile"] | None = "profile" if kv_capacity is None else (
        kv_capacity or None)
    return ReplicaConfig.from_profile(model, max_num_seqs=seqs, kv_capacity_tokens=cap,
                                      prefill_s=prefill_s)


def _paired_stats(all_runs: list[dict[str, ProtocolRun]]) -> dict[str, SpeedupStat]:
    """The paired statistic per policy; empty when the run is too short for steady steps."""
    try:
        return speedup_table([{n: r.run for n, r in runs.items()} for runs in all_runs])
    except ConfigError:
        return {}
