"""Measured decode throughput: seconds per decode step ``tau(b)`` at batch size ``b``.

A ``ThroughputModel`` is built from a table of measured ``(batch_size, seconds_per_step)``
points. Inside the table it interpolates linearly (which preserves monotonicity); beyond the
largest measured batch it continues with the slope of a least-squares fit
``tau(b) = a + c * b`` over the table, so the curve stays continuous and non-decreasing.
``tau(0) = 0`` by definition (an empty replica does no work).

Optionally a context-length term: a decode step at batch ``b`` whose running requests hold
``C`` tokens of context in total lasts ``tau(b) + context_s_per_token * C`` (attention reads
every cached token each step). With it, ``tau(b)`` is the step time at zero context. The derived
GPU profiles (``tailsieve profile --from-config``) and live measurements (``tailsieve profile
--endpoint``) set it.

Optional replica facts carried with the curve: ``kv_capacity_tokens`` (KV-cache capacity of one
replica in tokens), ``max_num_seqs`` (the engine's default running-request cap on that GPU) and
``provenance`` (a JSON object saying which numbers are measured, by whom, and which are derived
from what) and ``prefill`` (the replica's prefill cost, ``tailsieve.model.prefill``: seconds per
prefilled token plus the causal-attention coefficient). Files without them (earlier versions)
load unchanged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ProfileError
from tailsieve.model.prefill import PrefillModel

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ThroughputPoint:
    """One profiling measurement."""

    batch_size: int  # concurrent running requests on the replica
    step_s: float  # seconds per decode step at that batch size


@dataclass(frozen=True, slots=True)
class ThroughputModel:
    """Monotone ``tau(b)`` from measured points plus a linear fit for extrapolation."""

    points: tuple[ThroughputPoint, ...]
    name: str = "custom"
    source: str = ""  # where the numbers come from (free text, shown by `tailsieve profiles`)
    context_s_per_token: float = 0.0  # seconds added to a decode step per token of context
    kv_capacity_tokens: int | None = None  # KV-cache capacity of one replica, tokens (None: unbounded)
    max_num_seqs: int | None = None  # engine's default running-request cap on that GPU (None: unknown)
    provenance: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # JSON object
    prefill: PrefillModel | None = None  # prefill cost of one replica (None: not modelled)
    _b: FloatArray = field(init=False, repr=False, compare=False)
    _tau: FloatArray = field(init=False, repr=False, compare=False)
    _slope_s: float = field(init=False, repr=False, compare=False)
    _intercept_s: float = field(init=False, repr=False, compare=False)
    _table: list[FloatArray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate_points(self.points, where=self.name)
        k = self.context_s_per_token
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k < 0:
            raise ProfileError(
                f"{self.name}: context_s_per_token must be a finite number >= 0, got {k!r}"
            )
        for label, n in (("kv_capacity_tokens", self.kv_capacity_tokens),
                         ("max_num_seqs", self.max_num_seqs)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                raise ProfileError(f"{self.name}: {label} must be a positive integer, got {n!r}")
        if not isinstance(self.provenance, dict):
            raise ProfileError(f"{self.name}: provenance must be a JSON object (dict)")
        object.__setattr__(self, "provenance", dict(self.provenance))  # not shared by copies
        b = np.array([p.batch_size for p in self.points], dtype=np.float64)
        tau = np.array([p.step_s for p in self.points], dtype=np.float64)
        if len(b) >= 2:
            slope, intercept = np.polyfit(b, tau, 1)
        else:
            slope, intercept = 0.0, float(tau[0])
        object.__setattr__(self, "_b", b)
        object.__setattr__(self, "_tau", tau)
        object.__setattr__(self, "_slope_s", max(float(slope), 0.0))
        object.__setattr__(self, "_intercept_s", float(intercept))
        object.__setattr__(self, "_table", [np.zeros(1)])

    @classmethod
    def from_pairs(
        cls, pairs: list[tuple[int, float]], name: str = "custom", source: str = ""
    ) -> ThroughputModel:
        """Build from ``[(batch_size, seconds_per_step), ...]``."""
        pts = tuple(ThroughputPoint(int(b), float(s)) for b, s in pairs)
        return cls(points=pts, name=name, source=source)

    @property
    def max_measured_batch(self) -> int:
        return int(self._b[-1])

    @property
    def fit(self) -> tuple[float, float]:
        """The least-squares fit ``(a, c)`` of ``tau(b) = a + c*b`` over the table."""
        return self._intercept_s, self._slope_s

    def tau(self, b: float) -> float:
        """Seconds per decode step at batch size ``b`` (``tau(0) = 0``)."""
        if b <= 0:
            return 0.0
        return float(self.tau_array(np.array([b], dtype=np.float64))[0])

    def tau_array(self, b: npt.ArrayLike) -> FloatArray:
        """Vectorised ``tau``; entries ``<= 0`` give 0."""
        arr = np.asarray(b, dtype=np.float64)
        out = np.interp(arr, self._b, self._tau)
        beyond = arr > self._b[-1]
        if np.any(beyond):
            out = np.where(beyond, self._tau[-1] + self._slope_s * (arr - self._b[-1]), out)
        return np.where(arr <= 0, 0.0, out)

    def tau_at(self, b: npt.NDArray[np.integer]) -> FloatArray:
        """``tau`` at non-negative integer batch sizes, from a table kept with the model (a
        lookup instead of an interpolation; the table grows to the largest ``b`` asked for)."""
        top = int(b.max()) if b.size else 0
        table = self._table[0]
        if top >= table.size:
            table = self.taus(max(top, 2 * table.size))
            self._table[0] = table
        return table[b]

    def taus(self, max_batch: int) -> FloatArray:
        """``[tau(0), tau(1), ..., tau(max_batch)]`` (index = batch size)."""
        return self.tau_array(np.arange(max_batch + 1, dtype=np.float64))

    def tokens_per_s(self, b: float) -> float:
        """Per-request decode speed ``v(b) = 1 / tau(b)``."""
        return 1.0 / self.tau(b)

    def peak_aggregate_tokens_per_s(self, max_batch: int | None = None) -> float:
        """``max_b b / tau(b)`` over ``1..max_batch`` (default: the measured range)."""
        top = max_batch if max_batch is not None else self.max_measured_batch
        b = np.arange(1, max(top, 1) + 1, dtype=np.float64)
        return float(np.max(b / self.tau_array(b)))

    def scaled(self, factor: float, name: str | None = None) -> ThroughputModel:
        """The same curve with every ``tau`` multiplied by ``factor`` (slower if > 1)."""
        if not (math.isfinite(factor) and factor > 0):
            raise ProfileError(f"scale factor must be positive, got {factor!r}")
        pts = tuple(ThroughputPoint(p.batch_size, p.step_s * factor) for p in self.points)
        return replace(
            self,
            points=pts,
            name=name or f"{self.name}x{factor:g}",
            context_s_per_token=self.context_s_per_token * factor,
            prefill=None if self.prefill is None else self.prefill.scaled(factor),
        )

    def with_context(self, context_s_per_token: float) -> ThroughputModel:
        """The same ``tau(b)`` table with another context-length coefficient."""
        return replace(self, context_s_per_token=float(context_s_per_token))

    def step_s(self, b: float, context_tokens: float = 0.0) -> float:
        """Seconds of one decode step at batch ``b`` holding ``context_tokens`` in total:
        ``tau(b) + context_s_per_token * context_tokens`` (0 for an empty replica)."""
        if b <= 0:
            return 0.0
        return self.tau(b) + self.context_s_per_token * max(float(context_tokens), 0.0)

    @property
    def has_context_term(self) -> bool:
        return self.context_s_per_token > 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "source": self.source,
            "points": [{"batch_size": p.batch_size, "step_s": p.step_s} for p in self.points],
        }
        if self.context_s_per_token > 0:
            out["context_s_per_token"] = self.context_s_per_token
        if self.kv_capacity_tokens is not None:
            out["kv_capacity_tokens"] = self.kv_capacity_tokens
        if self.max_num_seqs is not None:
            out["max_num_seqs"] = self.max_num_seqs
        if self.prefill is not None:
            out["prefill"] = self.prefill.to_dict()
        if self.provenance:
            out["provenance"] = self.provenance
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "profile") -> ThroughputModel:
        """Parse and validate the JSON form written by ``to_dict``."""
        if not isinstance(data, dict):
            raise ProfileError(f"{where}: expected a JSON object with a 'points' list")
        raw = data.get("points")
        if not isinstance(raw, list):
            raise ProfileError(f"{where}: missing 'points' list")
        pts: list[ThroughputPoint] = []
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or "batch_size" not in item or "step_s" not in item:
                raise ProfileError(
                    f"{where}: point {i}: expected an object with 'batch_size' and 'step_s'"
                )
            b, s = item["batch_size"], item["step_s"]
            if isinstance(b, bool) or not isinstance(b, (int, float)) or b != int(b):
                raise ProfileError(f"{where}: point {i}: batch_size must be an integer, got {b!r}")
            if isinstance(s, bool) or not isinstance(s, (int, float)):
                raise ProfileError(f"{where}: point {i}: step_s must be a number, got {s!r}")
            pts.append(ThroughputPoint(int(b), float(s)))
        name = str(data.get("name", Path(where).stem))
        k = data.get("context_s_per_token", 0.0)
        if isinstance(k, bool) or not isinstance(k, (int, float)):
            raise ProfileError(f"{where}: context_s_per_token must be a number, got {k!r}")
        caps: dict[str, int | None] = {}
        for label in ("kv_capacity_tokens", "max_num_seqs"):
            n = data.get(label)
            if n is not None and (isinstance(n, bool) or not isinstance(n, (int, float))
                                  or n != int(n)):
                raise ProfileError(f"{where}: {label} must be an integer, got {n!r}")
            caps[label] = None if n is None else int(n)
        prov = data.get("provenance", {})
        if not isinstance(prov, dict):
            raise ProfileError(f"{where}: provenance must be a JSON object, got {prov!r}")
        raw_prefill = data.get("prefill")
        prefill = None if raw_prefill is None else PrefillModel.from_dict(raw_prefill, where)
        return cls(
            points=tuple(pts),
            name=name,
            source=str(data.get("source", "")),
            context_s_per_token=float(k),
            kv_capacity_tokens=caps["kv_capacity_tokens"],
            max_num_seqs=caps["max_num_seqs"],
            provenance=prov,
            prefill=prefill,
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> ThroughputModel:
        p = Path(path)
        if not p.is_file():
            raise ProfileError(f"profile file not found: {p}")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        return cls.from_dict(data, where=str(p))


def validate_points(points: tuple[ThroughputPoint, ...], where: str = "profile") -> None:
    """Reject empty, non-finite, non-positive, unsorted or speed-increasing tables."""
    if len(points) == 0:
        raise ProfileError(f"{where}: the throughput table is empty")
    prev: ThroughputPoint | None = None
    for i, p in enumerate(points):
        tag = f"{where}: point {i} (batch_size={p.batch_size}, step_s={p.step_s})"
        if not math.isfinite(p.step_s):
            raise ProfileError(f"{tag}: step_s is not a finite number")
        if p.batch_size < 1:
            raise ProfileError(f"{tag}: batch_size must be >= 1")
        if p.step_s <= 0:
            raise ProfileError(f"{tag}: step_s must be positive")
        if prev is not None:
            if p.batch_size <= prev.batch_size:
                raise ProfileError(f"{tag}: batch sizes must be strictly increasing")
            if p.step_s < prev.step_s:
                raise ProfileError(
                    f"{tag}: seconds per step decreases from {prev.step_s} at "
                    f"batch_size={prev.batch_size} (per-request speed must not rise with batch)"
                )
        prev = p
