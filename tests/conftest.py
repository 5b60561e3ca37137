"""Shared test helpers.

``assert_json_close``: two JSON-like structures are equal, floats within a relative tolerance.
Floats that come out of numerical work differ in the last bit between CPUs and numpy builds
(SIMD paths, summation order), so tests never compare them with exact ``==``.

CI cannot pass hollow: with ``CI=true`` (or ``1``) a test that would skip because what it needs
is missing -- the real model, the vLLM servers, the tiny model, the vLLM venv (the skip reasons
in ``CI_REQUIRED``) -- fails instead, with that reason. Elsewhere those tests skip as before.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Generator
from typing import Any

import pytest

CI_REQUIRED: tuple[str, ...] = (  # skip reasons that mean "CI did not provide it"
    "real model unavailable",
    "no real model",
    "TAILSIEVE_REAL_ENDPOINTS not set",
    "TAILSIEVE_VLLM_ENDPOINTS not set",
    "no vLLM servers",
    "no tiny model",
    "needs the vLLM venv",
)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def hollow_skip(reason: str) -> bool:
    """A skip that CI must not accept: what the test needs was not provided."""
    return any(r in reason for r in CI_REQUIRED)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[
        None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and in_ci()) or getattr(report, "wasxfail", None) is not None:
        return
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(
        report.longrepr)
    if hollow_skip(reason):
        report.outcome = "failed"
        report.longrepr = f"CI=true and a required resource is missing, so this fails: {reason}"

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

