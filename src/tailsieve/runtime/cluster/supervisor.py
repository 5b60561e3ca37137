"""The supervisor actor: keeps the launch state file current while Ray restarts servers.

A server actor that answers ``info`` gives its row (a restarted one: its new address). One that
does not answer is either restarting (its last row is kept) or out of restarts: Ray reports it
dead (``ActorDiedError``, confirmed by the GCS actor table when Ray exposes it), and its row is
marked ``dead`` with the reason and time (``state.dead_row``), so no reader takes its last
address and PID for a live server.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from tailsieve.runtime.cluster.state import dead_row, is_dead, set_replicas, write_json_atomic
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
            if self.poll(ray, handles):
                write_json_atomic(self.path, self.state)
                self.num_writes += 1

    def poll(self, ray: Any, handles: list[Any]) -> bool:
        """One round: ask every server actor for its row; True when the state changed."""
        rows = list(self.state["replicas"])
        live = [i for i, r in enumerate(rows) if not is_dead(r)]
        refs = {i: handles[i].info.remote() for i in live}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.interval_s)
        changed = False
        for i, ref in refs.items():
            if ref not in ready:
                continue
            try:
                row = ray.get(ref)
            except Exception as exc:  # restarting (keep the last row) or out of restarts
                why = _death(ray, handles[i], exc)
                if why is None:
                    continue
                row = dead_row(rows[i], why)
            if row != rows[i]:
                rows[i] = row
                changed = True
        if changed:
            set_replicas(self.state, rows)
            self.state["updated_at"] = time.time()
        return changed


def _death(ray: Any, handle: Any, exc: BaseException) -> str | None:
    """Why the actor is dead for good, or None when it may come back (restarting)."""
    if not isinstance(exc, ray.exceptions.ActorDiedError):
        return None
    state = _actor_state(handle)
    if state is not None and state.get("State") != "DEAD":
        return None  # Ray restarts it
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    restarts = "" if state is None else f" after {state.get('NumRestarts', '?')} restarts"
    return f"out of restarts{restarts}: {first[:300]}"


def _actor_state(handle: Any) -> dict[str, Any] | None:
    """The GCS actor table row of ``handle`` (None when Ray does not expose it)."""
    with contextlib.suppress(Exception):
        from ray._private.state import actors

        return dict(actors(actor_id=handle._actor_id.hex()))
    return None
