"""A recording made in parts: epochs recorded by separate runs, joined into one trace.

A long recording can run one epoch at a time (``RecordConfig.first_epoch``; ``tailsieve record
run --first-epoch E --epochs 1 --seed S``): with the same run seed every request keeps the seed
it would have had in one run (``record.seeds``). ``join_parts`` checks that the parts are one
recording (same prompts, sampling, servers' model and run seed; disjoint epochs that together
are 0..E-1) and returns the whole: rows in epoch order, settings with the total epoch count,
the parts' start times and durations, and the sibling copies of the whole trace.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.record.recorder import Recording, copies_info
from tailsieve.workload.io import read_trace
from tailsieve.workload.trace import Trace

_SAME = ("prompts", "num_prompts", "served_model", "run_seed", "seed_rule")
_PER_PART = ("first_epoch", "num_epochs")  # config keys that differ between parts


def read_recording(path: str | Path) -> Recording:
    """A recording written by ``Recording.write``: the trace and ``<path>.info.json``."""
    p = Path(path)
    info_path = p.with_name(p.name + ".info.json")
    if not info_path.is_file():
        raise ConfigError(f"{p}: no {info_path.name} beside it (not a recording)")
    info = json.loads(info_path.read_text())
    if not isinstance(info, dict) or "config" not in info:
        raise ConfigError(f"{info_path}: not a recording's info (no 'config')")
    return Recording(read_trace(p), info)


def join_parts(parts: Sequence[Recording]) -> Recording:
    """The recording the parts make together (see the module doc); ``ConfigError`` names the
    first setting in which two parts differ, or the epochs that overlap or are missing."""
    if not parts:
        raise ConfigError("no recordings to join")
    ordered = sorted(parts, key=lambda r: int(r.info["config"].get("first_epoch", 0)))
    first = ordered[0].info
    for k, rec in enumerate(ordered[1:], 1):
        _check_same(first, rec.info, k)
    epochs = [e for r in ordered for e in _epochs(r.info)]
    if epochs != list(range(len(epochs))):
        raise ConfigError(f"the parts' epochs {epochs} are not 0..{len(epochs) - 1} once each")
    trace = _concat([r.trace for r in ordered])
    config = {**first["config"], "first_epoch": 0, "num_epochs": len(epochs)}
    info = {
        **first,
        "config": config,
        "started_utc": first["started_utc"],
        "wall_s": sum(float(r.info["wall_s"]) for r in ordered),
        "steps": [s for r in ordered for s in r.info["steps"]],
        "server_versions": sorted({v for r in ordered for v in r.info["server_versions"]}),
        "parts": [{"epochs": _epochs(r.info), "started_utc": r.info["started_utc"],
                   "wall_s": r.info["wall_s"], "endpoints": r.info["endpoints"]}
                  for r in ordered],
        "sibling_copies": copies_info(trace),
    }
    return Recording(trace, info)


def _epochs(info: dict[str, Any]) -> list[int]:
    cfg = info["config"]
    start = int(cfg.get("first_epoch", 0))
    return list(range(start, start + int(cfg["num_epochs"])))


def _check_same(a: dict[str, Any], b: dict[str, Any], k: int) -> None:
    for key in _SAME:
        if a.get(key) != b.get(key):
            raise ConfigError(f"part {k} differs in {key}: {b.get(key)!r} vs {a.get(key)!r}")
    ca = {x: v for x, v in a["config"].items() if x not in _PER_PART}
    cb = {x: v for x, v in b["config"].items() if x not in _PER_PART}
    for key in sorted(set(ca) | set(cb)):
        if ca.get(key) != cb.get(key):
            raise ConfigError(f"part {k} differs in setting {key}: {cb.get(key)!r} vs "
                              f"{ca.get(key)!r}")
    if a.get("run_seed") is None:
        raise ConfigError("unseeded parts cannot be joined: their requests' random numbers "
                          "are not those of one recording")


def _concat(traces: Sequence[Trace]) -> Trace:
    cols = [t.columns() for t in traces]
    keys = set(cols[0])
    if any(set(c) != keys for c in cols[1:]):
        raise ConfigError("the parts' traces have different columns")
    merged: dict[str, Any] = {}
    for key in keys:
        merged[key] = [v for c in cols for v in list(c[key])]
    return Trace.from_columns(source=traces[0].source, **merged)
