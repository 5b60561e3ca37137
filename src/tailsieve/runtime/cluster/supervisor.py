"""The supervisor actor: keeps the launch state file current while Ray restarts servers."""

from __future__ import annotations

import threading
import time
from typing import Any

from tailsieve.runtime.cluster.state import write_json_atomic
from tailsieve.runtime.cluster.stop import import_ray


class Supervisor:
    """Polls the server actors and keeps the state file current (runs as a Ray actor)."""

    def __init__(self, state: dict[str, Any], path: str, interval_s: float) -> None:
        self.state, self.path, self.interval_s = state, path, interval_s
        self.num_writes = 0
        threading.Thread(target=self._run, name="tailsieve-supervisor", daemon=True).start()

    def ready(self) -> int:
        """Number of state file rewrites so far (also: the actor is up)."""
        return self.num_writes

    def _run(self) -> None:  # pragma: no cover - exercised through Ray in the cluster test
        ray = import_ray()
        handles = [
            ray.get_actor(n, namespace=self.state["ray"]["namespace"])
            for n in self.state["ray"]["actors"]
        ]
        while True:
            time.sleep(self.interval_s)
            refs = [h.info.remote() for h in handles]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.interval_s)
            changed = False
            for i, ref in enumerate(refs):
                if ref not in ready:
                    continue
                try:
                    row = ray.get(ref)
                except Exception:  # restarting or dead: keep the last row
                    continue
                if row != self.state["replicas"][i]:
                    self.state["replicas"][i] = row
                    changed = True
            if changed:
                self.state["endpoints"] = [r["endpoint"] for r in self.state["replicas"]]
                self.state["updated_at"] = time.time()
                write_json_atomic(self.path, self.state)
                self.num_writes += 1
