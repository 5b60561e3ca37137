"""Lockstep profiles of all servers (``tailsieve profile --endpoint A --endpoint B``'s code path)
and the measured time to first token, saved under the output folder."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from real_engine.servers import first_token_s, loadavg, log
from tailsieve.errors import ReplicaError
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.profile_fit import ProfileResult
from tailsieve.runtime.profiler import ProfileSettings, profile_endpoints


@dataclass(frozen=True, slots=True)
class Profiled:
    """One lockstep profile of every server, and the time to first token right after it."""

    label: str  # "before" (the live steps) | "after"
    results: tuple[ProfileResult, ...]
    files: tuple[str, ...]
    ttft_s: tuple[float, ...]  # per server: median latency of a max_tokens=1 request at b=1
    wall_s: float
    loadavg_before: str
    loadavg_after: str

    @property
    def prefill_s(self) -> float:
        """Per-request fixed cost given to the simulator: the mean time to first token."""
        return statistics.fmean(self.ttft_s)

    def mean_model(self) -> ThroughputModel:
        """tau(b) averaged over the servers at each measured batch size (running max)."""
        return mean_curve([r.model for r in self.results], f"real-mean-{self.label}",
                          f"mean of {', '.join(self.files)}")

    def summary(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "files": list(self.files),
            "wall_s": round(self.wall_s, 2),
            "loadavg_before": self.loadavg_before,
            "loadavg_after": self.loadavg_after,
            "ttft_b1_s": [round(t, 4) for t in self.ttft_s],
            "prefill_s": round(self.prefill_s, 4),
            "mean_tau_s": {str(p.batch_size): round(p.step_s, 6)
                           for p in self.mean_model().points},
            "per_server": [
                {"file": f, "tau_s": {str(m.batch_size): round(m.step_s, 6)
                                      for m in r.measurements}}
                for f, r in zip(self.files, self.results, strict=True)
            ],
        }


async def measure(endpoints: list[str], model: str, batch_sizes: tuple[int, ...], tokens: int,
                  repeats: int, ttft_repeats: int, label: str, out_dir: Path,
                  prompt: str = "hello") -> Profiled:
    """Profile every endpoint in lockstep (each round on all servers at once: the load of a live
    step), then measure the time to first token of ``prompt``; files go to ``out_dir``."""
    before, t0 = loadavg(), time.perf_counter()
    settings = [ProfileSettings(endpoint=u, batch_sizes=batch_sizes, tokens=tokens, model=model,
                                repeats=repeats) for u in endpoints]
    names = [f"real-{u.rsplit(':', 1)[-1]}-{label}" for u in endpoints]
    try:
        results = await profile_endpoints(settings, names)
    except ReplicaError as exc:
        # pooled keep-alive connections occasionally hit "Server disconnected" on a loaded
        # machine; one retry measures afresh
        log(f"lockstep profiling failed ({exc}); measuring again")
        results = await profile_endpoints(settings, names)
    ttft = tuple([await first_token_s(u, model, prompt, ttft_repeats) for u in endpoints])
    files: list[str] = []
    for u, r in zip(endpoints, results, strict=True):
        path = out_dir / f"profile_{u.rsplit(':', 1)[-1]}_{label}.json"
        data = r.to_dict()
        data["loadavg_before"], data["loadavg_after"] = before, loadavg()
        path.write_text(json.dumps(data, indent=2) + "\n")
        files.append(path.name)
    return Profiled(label, tuple(results), tuple(files), ttft, time.perf_counter() - t0,
                    before, loadavg())


def mean_curve(models: list[ThroughputModel], name: str, source: str) -> ThroughputModel:
    """tau(b) averaged over ``models`` at each batch size the first measured, kept
    non-decreasing in b (running max)."""
    pairs: list[tuple[int, float]] = []
    top = 0.0
    for pt in models[0].points:
        top = max(top, statistics.fmean(m.tau(pt.batch_size) for m in models))
        pairs.append((pt.batch_size, top))
    return ThroughputModel.from_pairs(pairs, name=name, source=source)


def bracket(profiles: list[Profiled], name: str) -> tuple[ThroughputModel, float]:
    """The mean of several profiles (tau, prefill): the machine's speed over the window they
    bracket."""
    model = mean_curve([p.mean_model() for p in profiles], name,
                       "mean of " + ", ".join(p.label for p in profiles))
    return model, statistics.fmean(p.prefill_s for p in profiles)
