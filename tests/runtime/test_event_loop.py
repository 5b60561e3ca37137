"""The runtime's event-loop choice: uvloop when installed, asyncio's loop otherwise or on request."""

from __future__ import annotations

import asyncio
import builtins
from typing import Any

import pytest

from tailsieve.errors import ConfigError
from tailsieve.integrations.loop_thread import LoopThread
from tailsieve.runtime import event_loop


async def _which() -> str:
    await asyncio.sleep(0)
    return event_loop.loop_name()


def _without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "uvloop":
            raise ImportError("no uvloop here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_asyncio_on_request_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert event_loop.run(_which(), "asyncio") == "asyncio"
    monkeypatch.setenv(event_loop.ENV, "asyncio")
    assert event_loop.run(_which()) == "asyncio"
    loop = event_loop.new_event_loop()
    try:
        assert event_loop.loop_name(loop) == "asyncio"
    finally:
        loop.close()


def test_unknown_choice_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="expected one of auto, asyncio, uvloop"):
        event_loop.loop_factory("trio")
    monkeypatch.setenv(event_loop.ENV, "fast")
    with pytest.raises(ConfigError, match="TAILSIEVE_EVENT_LOOP"):
        event_loop.run(_which())


def test_without_uvloop_auto_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_loop.ENV, raising=False)
    _without_uvloop(monkeypatch)
    assert event_loop.loop_factory() is None
    assert event_loop.run(_which()) == "asyncio"
    with pytest.raises(ConfigError, match=r"pip install 'tailsieve\[fast\]'"):
        event_loop.loop_factory("uvloop")


def test_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.run(_which()) == "uvloop"  # auto
    assert event_loop.run(_which(), "uvloop") == "uvloop"
    lt = LoopThread()  # the framework adapters' private loop
    try:
        assert lt.run(_which()) == "uvloop"
    finally:
        lt.close()
