"""Shared helpers of the paper suite: machine info, JSON/PNG output, paired simulations."""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np

from tailsieve.control.static import StaticController
from tailsieve.core.controller import Controller
from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.speculative import SpecConfig
from tailsieve.sim.baseline_step import BASELINE_POLICIES
from tailsieve.sim.driver import (
    ControllerFactory,
    LengthModel,
    PairedLengths,
    ProtocolRun,
    SimSettings,
    default_controller,
    epoch_prompt_ids,
    run_baseline,
    run_protocol,
)
from tailsieve.sim.records import PolicyRun
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.workload.presets import AIME_TRACE_IN_REPO

REPO = Path(__file__).resolve().parents[2]


def default_out(name: str) -> Path:
    """Default output of a module run on its own: under the system temp dir, never inside the
    repository (as ``benchmarks/outdir.py``; the committed results need ``--out``)."""
    return Path(tempfile.gettempdir()) / "tailsieve-bench" / name
AIME_CSV = AIME_TRACE_IN_REPO
PROFILE = DEFAULT_PROFILE  # GPU throughput profile of the suite (derived Qwen3-4B on one H100)


def machine_info() -> dict[str, Any]:
    """Where and when a result was measured."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def write_json(out_dir: Path, name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus machine info) to ``out_dir/name.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    payload.setdefault("machine", machine_info())
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    return path


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x)}")


def pools_for(
    profile: str, tail_spec: str = "none", bulk_spec: str = "none", capacity: bool = True
) -> PoolConfigs:
    """Pool timing for a profile with each pool's speculative config (``mtp:3``, ``none``);
    the profile's KV capacity and running cap apply unless ``capacity`` is False."""
    model = load_profile(profile)
    base = (ReplicaConfig.from_profile(model) if capacity
            else ReplicaConfig.from_profile(model, max_num_seqs=None, kv_capacity_tokens=None))
    return PoolConfigs.from_specs(base, SpecConfig.parse(tail_spec), SpecConfig.parse(bulk_spec))


@dataclass(slots=True)
class PairedRuns:
    """Runs of several policies over one prompt stream, with the shared length cache."""

    runs: dict[str, ProtocolRun]
    lengths: PairedLengths
    settings: SimSettings

    def run(self, policy: str) -> PolicyRun:
        return self.runs[policy].run


def simulate(
    policies: Sequence[str],
    settings: SimSettings,
    workload: Any,
    pools: PoolConfigs,
    controller_factory: ControllerFactory = default_controller,
    pools_by_policy: dict[str, PoolConfigs] | None = None,
) -> PairedRuns:
    """Like ``tailsieve.sim.driver.run_policies`` but keeps the ``PairedLengths`` (so delivered
    response lengths can be read back) and allows per-policy pool configs."""
    wl: LengthModel = workload
    dataset = workload.prompt_ids()
    lengths = PairedLengths(wl, settings.group_size, settings.seed)
    out: dict[str, ProtocolRun] = {}
    for name in policies:
        p = (pools_by_policy or {}).get(name, pools)
        ids = epoch_prompt_ids(dataset, settings.seed)
        if name in BASELINE_POLICIES:
            out[name] = ProtocolRun(run_baseline(name, settings, ids, lengths, p), None, None)
        else:
            out[name] = run_protocol(name, settings, ids, lengths, p, controller_factory)
    return PairedRuns(out, lengths, settings)


def fixed_factory(q: int, m: int, spread: bool = False) -> ControllerFactory:
    """A controller factory for ``run_protocol`` holding (q, m) with ``c = q``: the simulated
    ground truth of one point of the (q, m) landscape (the package's ``StaticController``);
    ``spread`` deals single responses instead of whole groups."""

    def make(name: str, settings: SimSettings, pools: PoolConfigs) -> Controller:
        return StaticController(q, m, settings.num_groups, settings.num_replicas, spread=spread)

    return make


def at_step(step: int) -> Callable[[int], bool]:
    """Step selector for ``delivered_lengths``: exactly ``step``."""
    return lambda t: t == step


def delivered_lengths(paired: PairedRuns, policy: str, steps: Callable[[int], bool]) -> np.ndarray:
    """All delivered response lengths of ``policy`` over the regular steps selected by
    ``steps`` (a response's length is a function of (prompt, step), so read it back from the
    shared cache)."""
    out: list[np.ndarray] = []
    for r in paired.run(policy).regular:
        if steps(r.step):
            out.extend(paired.lengths(pid, r.step) for pid in r.delivered_ids)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


class Timer:
    """Wall-clock seconds since construction."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    @property
    def elapsed_s(self) -> float:
        return round(time.perf_counter() - self.t0, 2)


def mean(xs: Sequence[float]) -> float:
    """Mean of a non-empty sequence (NaN when empty)."""
    return float(np.mean(xs)) if len(xs) else float("nan")


def savefig(fig: Any, path: Path) -> None:
    """Save a matplotlib figure (creating the folder) and close it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
