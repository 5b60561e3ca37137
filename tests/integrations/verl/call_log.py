"""``CallLog``: every generate call the test server actors receive, kept apart from them (a
killed server's calls stay on record). Imports nothing heavy: Ray starts it quickly."""

from __future__ import annotations

from typing import Any


class CallLog:
    """``start`` when a call arrives, ``finish`` with what it returned."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], dict[str, Any]] = {}

    def start(self, server: str, request_id: str, record: dict[str, Any]) -> None:
        self.calls[(server, request_id)] = {"server": server, "request_id": request_id,
                                            **record, "tokens": None, "stop": None}

    def finish(self, server: str, request_id: str, tokens: list[int], stop: str | None) -> None:
        self.calls[(server, request_id)].update(tokens=tokens, stop=stop)

    def all(self) -> list[dict[str, Any]]:
        return list(self.calls.values())

    def clear(self) -> None:
        self.calls.clear()
