"""The proxy tests: ``tests/runtime``'s helpers on the path, and a proxy over stub replicas
(``proxy_stub``) as a fixture."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

RUNTIME_TESTS = str(Path(__file__).resolve().parents[1])
if RUNTIME_TESTS not in sys.path:
    sys.path.insert(0, RUNTIME_TESTS)
PROXY_TESTS = str(Path(__file__).resolve().parent)
if PROXY_TESTS not in sys.path:
    sys.path.insert(0, PROXY_TESTS)

from proxy_stub import stub_proxy  # noqa: E402

from tailsieve.runtime.proxy import RoutingProxy  # noqa: E402


@pytest.fixture
async def proxy() -> AsyncIterator[RoutingProxy]:
    p = await stub_proxy()
    try:
        yield p
    finally:
        await p.aclose()
