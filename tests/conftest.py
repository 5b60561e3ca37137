"""Shared test helpers.

``assert_json_close``: two JSON-like structures are equal, floats within a relative tolerance.
Floats that come out of numerical work differ in the last bit between CPUs and numpy builds
(SIMD paths, summation order), so tests never compare them with exact ``==``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

REL_TOL = 1e-9


def json_close(a: Any, b: Any, rel: float = REL_TOL, where: str = "$") -> list[str]:
    """Where ``a`` and ``b`` differ: ints, strings, bools and structure exactly, floats within
    ``rel`` (an int and a float compare as numbers)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys differ: {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in json_close(a[k], b[k], rel, f"{where}.{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{where}: lengths {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in json_close(x, y, rel, f"{where}[{i}]")]
    numbers = (int, float)
    if (isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool)
            and not isinstance(b, bool) and (isinstance(a, float) or isinstance(b, float))):
        if math.isclose(a, b, rel_tol=rel, abs_tol=0.0) or (math.isnan(a) and math.isnan(b)):
            return []
        return [f"{where}: {a!r} != {b!r} (rel tol {rel})"]
    return [] if a == b and type(a) is type(b) else [f"{where}: {a!r} != {b!r}"]


@pytest.fixture
def assert_json_close() -> Callable[..., None]:
    def check(a: Any, b: Any, rel: float = REL_TOL) -> None:
        diffs = json_close(a, b, rel)
        assert not diffs, "\n".join(diffs[:20])

    return check

