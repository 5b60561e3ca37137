"""The launch state file: written atomically, read by ``rollout --state`` as an address
provider (``StateFileAddresses``), so a server restarted at a new address reaches the router.

Each row of ``replicas`` has ``status``: ``alive`` (its ``endpoint``, ``pid`` are the running
server) or ``dead`` (out of restarts: ``endpoint`` and ``pid`` are null, ``reason`` and
``dead_at`` say why and when, ``last_endpoint``/``last_pid`` where it ran). ``endpoints`` keeps
one address per replica so replica indices stay stable: a dead replica's last address, where
nothing answers any more (the router keeps it out of service); ``dead`` lists their indices.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tailsieve.errors import ConfigError


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename (readers never see half)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, p)


def is_dead(row: dict[str, Any]) -> bool:
    return row.get("status") == "dead"


def dead_row(row: dict[str, Any], reason: str, at_s: float | None = None) -> dict[str, Any]:
    """``row`` marked dead: no live address or PID, the reason and time (unix seconds)."""
    if is_dead(row):
        return dict(row)
    return {
        **row,
        "status": "dead",
        "endpoint": None,
        "pid": None,
        "last_endpoint": row.get("endpoint"),
        "last_pid": row.get("pid"),
        "reason": reason,
        "dead_at": time.time() if at_s is None else at_s,
    }


def endpoints_of(rows: list[dict[str, Any]]) -> list[str]:
    """One address per replica: the live one, or a dead replica's last one."""
    return [str(r["last_endpoint"] if is_dead(r) else r["endpoint"]) for r in rows]


def set_replicas(state: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Put ``rows`` in ``state`` with the derived ``endpoints`` and ``dead`` lists."""
    state["replicas"] = rows
    state["endpoints"] = endpoints_of(rows)
    state["dead"] = [int(r.get("index", i)) for i, r in enumerate(rows) if is_dead(r)]


class StateFileAddresses:
    """Callable returning the state file's current ``endpoints`` (re-read when it changed).
    ``dead`` maps the replicas out of restarts to the reason."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._urls: list[str] = []
        self.dead: dict[int, str] = {}
        self()

    def __call__(self) -> list[str]:
        try:
            st = self.path.stat()
        except OSError:
            if self._urls:
                return list(self._urls)  # stopped meanwhile: keep the last known addresses
            raise ConfigError(f"state file {self.path} not found") from None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                data = json.loads(self.path.read_text())
                urls = [str(u) for u in data["endpoints"]]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"state file {self.path}: no endpoints ({exc})") from None
            rows = data.get("replicas") or []
            self.dead = {
                i: str(r.get("reason", ""))
                for i, r in enumerate(rows)
                if isinstance(r, dict) and is_dead(r)
            }
            self._stamp, self._urls = stamp, urls
        return list(self._urls)
