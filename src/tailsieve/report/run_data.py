"""A run directory (from ``simulate``, ``rollout`` or ``demo``) read into one normalised shape.

Recognised files, any subset:
- ``simulate.json``: ``{"settings", "policies": [summary...], "runs": {policy: [record...]}}``
  plus optional ``"timelines": {policy: StepTimeline dict}`` and ``"lengths": {policy: [...]}``;
- ``steps.jsonl``: one step record per line (``policy`` key optional), with ``summary.json``;
- ``timelines.json``: ``{policy: StepTimeline dict}``;
- ``batches/<policy>/step_*.jsonl`` or ``batches/step_*.jsonl``: delivered responses with
  ``response_tokens``;
- ``capture.json``: ``{"rho": [...], "capture_rate": [...]}`` (from ``trace capture --json``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailsieve.core.timeline import StepTimeline
from tailsieve.errors import TraceError


@dataclass(slots=True)
class RunData:
    """Everything a report draws."""

    source: Path
    kind: str  # "simulate" | "rollout" | "demo" | "mixed"
    settings: dict[str, Any] = field(default_factory=dict)
    summaries: list[dict[str, Any]] = field(default_factory=list)
    steps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # policy -> records
    timelines: dict[str, StepTimeline] = field(default_factory=dict)
    lengths: dict[str, list[int]] = field(default_factory=dict)  # policy -> response tokens
    capture: dict[str, list[float]] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not (self.steps or self.lengths or self.capture or self.timelines)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}: line {i}: not valid JSON ({exc.msg})") from None
    return rows


def load_run(folder: str | Path) -> RunData:
    """Read a run directory; raises ``TraceError`` if it holds nothing a report can draw."""
    root = Path(folder)
    if not root.is_dir():
        raise TraceError(f"run directory not found: {root}")
    data = RunData(source=root, kind="mixed")
    kinds: list[str] = []
    sim = root / "simulate.json"
    if sim.is_file():
        kinds.append("simulate")
        _load_simulate(data, _read_json(sim))
    steps = root / "steps.jsonl"
    if steps.is_file():
        kinds.append("rollout")
        for row in _read_jsonl(steps):
            data.steps.setdefault(str(row.get("policy", "run")), []).append(row)
        summary = root / "summary.json"
        if summary.is_file():
            s = _read_json(summary)
            data.summaries.extend(s if isinstance(s, list) else s.get("policies", [s]))
            if isinstance(s, dict):
                data.settings.update(s.get("settings", {}))
    demo = root / "demo.json"
    if demo.is_file():
        kinds.append("demo")
        d = _read_json(demo)
        data.settings.update(d.get("settings", {}))
        data.summaries = d.get("policies", data.summaries)
    tl = root / "timelines.json"
    if tl.is_file():
        for pol, t in _read_json(tl).items():
            data.timelines[pol] = StepTimeline.from_dict(t)
    _load_batches(data, root / "batches")
    cap = root / "capture.json"
    if cap.is_file():
        _load_capture(data, _read_json(cap))
    if data.is_empty:
        raise TraceError(
            f"{root}: no run data found (expected simulate.json, steps.jsonl, demo.json, "
            "timelines.json, batches/ or capture.json)"
        )
    data.kind = kinds[0] if len(kinds) == 1 else ("demo" if "demo" in kinds else "mixed")
    return data


def _load_simulate(data: RunData, blob: dict[str, Any]) -> None:
    data.settings.update(blob.get("settings", {}))
    data.summaries.extend(blob.get("policies", []))
    for pol, recs in (blob.get("runs") or blob.get("steps") or {}).items():
        data.steps[pol] = list(recs)
    for pol, t in blob.get("timelines", {}).items():
        data.timelines[pol] = StepTimeline.from_dict(t)
    for pol, lens in blob.get("lengths", {}).items():
        data.lengths[pol] = [int(x) for x in lens]


def _load_batches(data: RunData, folder: Path) -> None:
    if not folder.is_dir():
        return
    groups = [p for p in sorted(folder.iterdir()) if p.is_dir()] or [folder]
    for g in groups:
        files = sorted(g.glob("step_*.jsonl"))
        if not files:
            continue
        pol = g.name if g != folder else "run"
        lens = data.lengths.setdefault(pol, [])
        for f in files:
            lens.extend(int(r["response_tokens"]) for r in _read_jsonl(f) if "response_tokens" in r)


def _load_capture(data: RunData, blob: Any) -> None:
    if isinstance(blob, dict) and "rho" in blob:
        data.capture = {k: [float(x) for x in v] for k, v in blob.items() if isinstance(v, list)}
        return
    rows = blob.get("rows", blob) if isinstance(blob, dict) else blob
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        keys = [k for k, v in rows[0].items() if isinstance(v, (int, float))]
        data.capture = {k: [float(r[k]) for r in rows] for k in keys}
