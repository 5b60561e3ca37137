"""Tail-strength transform (paper appendix A.5).

With ``M`` the median and ``P90`` the 90th percentile of the lengths,
``L' = L`` for ``L <= M`` and ``L' = M + s_r (L - M)`` above, ``s_r = (r M - M) / (P90 - M)``,
so the transformed ``P90' / P50' = r`` (the lower half, hence the median, is unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError, TraceError
from tailsieve.workload.trace import IntArray, Trace

TAIL_PRESETS: dict[str, float | None] = {"weak": 1.5, "real": None, "strong": 6.0}


@dataclass(frozen=True, slots=True)
class TailTransform:
    """The fitted transform: median, P90 and stretch factor ``s_r`` (identity when r is None)."""

    median_tokens: float
    p90_tokens: float
    ratio: float | None

    @property
    def stretch(self) -> float:
        """``s_r`` (1 for the identity)."""
        if self.ratio is None:
            return 1.0
        return (self.ratio * self.median_tokens - self.median_tokens) / (
            self.p90_tokens - self.median_tokens
        )

    def apply(self, lengths: npt.ArrayLike) -> IntArray:
        """Transformed lengths, rounded to integer tokens (>= 1 where the input was >= 1)."""
        arr = np.asarray(lengths, dtype=np.float64)
        m = self.median_tokens
        out = np.where(arr <= m, arr, m + self.stretch * (arr - m))
        return np.rint(out).astype(np.int64)


def parse_tail_strength(value: str | float | None) -> float | None:
    """``weak`` / ``real`` / ``strong`` or a number ``r > 1`` (``None`` / ``real`` = identity)."""
    if value is None:
        return None
    if isinstance(value, str):
        key = value.strip().lower()
        if key in TAIL_PRESETS:
            return TAIL_PRESETS[key]
        try:
            value = float(key)
        except ValueError:
            raise ConfigError(
                f"tail strength {value!r}: use weak, real, strong or a number > 1"
            ) from None
    if not value > 1.0:
        raise ConfigError(f"tail strength r must be > 1 (P90/P50 ratio), got {value}")
    return float(value)


def fit_tail_transform(lengths: npt.ArrayLike, r: str | float | None) -> TailTransform:
    """Fit the transform to ``lengths`` for target ratio ``r`` (see ``parse_tail_strength``)."""
    arr = np.asarray(lengths, dtype=np.float64)
    if arr.size == 0:
        raise TraceError("tail transform: no lengths")
    m, p90 = (float(x) for x in np.percentile(arr, [50, 90]))
    ratio = parse_tail_strength(r)
    if ratio is not None and not p90 > m:
        raise TraceError(f"tail transform needs P90 > median, got P50 {m} and P90 {p90}")
    return TailTransform(m, p90, ratio)


def transform_lengths(lengths: npt.ArrayLike, r: str | float | None) -> IntArray:
    """Lengths with P90/P50 set to ``r`` (``weak`` 1.5, ``real`` unchanged, ``strong`` 6)."""
    return fit_tail_transform(lengths, r).apply(lengths)


def transform_trace(trace: Trace, r: str | float | None) -> Trace:
    """``trace`` with transformed response lengths. Truncation flags are kept as recorded."""
    return trace.with_lengths(transform_lengths(trace.response_tokens, r))
