"""``simulate(...)``: the Python face of ``tailsieve simulate`` (paired multi-step simulation).

::

    from tailsieve import simulate
    result = simulate("paper-math", policies=["uniform", "tailsieve"], steps=20, seed=0)
    result.speedup("tailsieve")          # uniform's steady step time / tailsieve's
    result.summaries["tailsieve"]        # the row ``tailsieve simulate --json`` prints
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.speculative import SpecConfig
from tailsieve.sim.driver import (
    ALL_POLICIES,
    KNOWN_POLICIES,
    ProtocolRun,
    SimSettings,
    epoch_prompt_ids,
    run_policies,
)
from tailsieve.sim.replicas import PoolConfigs
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

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``tailsieve simulate --json`` prints (settings + a list of summaries)."""
        return {"settings": dict(self.settings), "policies": list(self.summaries.values())}


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
    q0: int | None = None,
    m0: int | None = None,
    tail_strength: str | None = None,
    tail_spec: str = "none",
    bulk_spec: str = "none",
    max_num_seqs: int | None = None,
    kv_capacity_tokens: int | None = None,
    prefill_s: float = 0.0,
    num_prompts: int = 1000,
) -> SimulationResult:
    """Simulate ``policies`` (default: all of ``tailsieve simulate``; ``uniform`` is always
    added as the paired reference) on the same prompts and response lengths.

    ``workload``: a preset (``paper-math``, ``aime-r1``), ``aime`` (the shipped AIME trace,
    resampled) or a trace file. ``max_num_seqs`` / ``kv_capacity_tokens``: None takes the
    profile's (0 switches the cap off). The other arguments mirror the CLI options of the same
    names.
    """
    names = list(policies) if policies else list(ALL_POLICIES)
    for name in names:
        if name not in KNOWN_POLICIES:
            raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(KNOWN_POLICIES)}")
    if "uniform" not in names:
        names.insert(0, "uniform")
    settings = SimSettings(
        num_replicas=replicas, num_groups=groups, group_size=group_size, num_steps=steps,
        seed=seed, q0=q0, m0=m0,
    )
    base = ReplicaConfig.from_profile(
        load_profile(profile),
        max_num_seqs="profile" if max_num_seqs is None else (max_num_seqs or None),
        kv_capacity_tokens="profile" if kv_capacity_tokens is None else (kv_capacity_tokens or None),
        prefill_s=prefill_s,
    )
    pools = PoolConfigs.from_specs(base, SpecConfig.parse(tail_spec), SpecConfig.parse(bulk_spec))
    wl = resolve_workload(workload, tail_strength, seed=seed, num_prompts=num_prompts)
    dataset = wl.prompt_ids()
    runs = run_policies(names, settings, lambda: epoch_prompt_ids(dataset, seed), wl, pools)
    uniform = runs["uniform"].run
    meta: dict[str, Any] = {
        "workload": workload, "tail_strength": tail_strength or "real", "replicas": replicas,
        "groups": groups, "group_size": group_size, "steps": steps, "profile": profile,
        "seed": seed, "tail_spec": tail_spec, "bulk_spec": bulk_spec, "q0": q0, "m0": m0,
        "max_num_seqs": base.max_num_seqs, "kv_capacity_tokens": base.kv_capacity_tokens,
        "prefill_s": prefill_s,
    }
    summaries = {name: r.run.summary(uniform) for name, r in runs.items()}
    return SimulationResult(meta, summaries, runs)
