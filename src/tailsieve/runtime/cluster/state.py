"""The launch state file: written atomically, read by ``rollout --state`` as an address
provider (``StateFileAddresses``), so a server restarted at a new address reaches the router."""

from __future__ import annotations

import json
import os
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


class StateFileAddresses:
    """Callable returning the state file's current ``endpoints`` (re-read when it changed)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._urls: list[str] = []
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
                urls = [str(u) for u in json.loads(self.path.read_text())["endpoints"]]
            except (OSError, ValueError, KeyError) as exc:
                raise ConfigError(f"state file {self.path}: no endpoints ({exc})") from None
            self._stamp, self._urls = stamp, urls
        return list(self._urls)
