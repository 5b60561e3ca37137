"""Which of verl's trajectories are sessions still, and under which key the gateway knows them.

verl's client passes a trajectory's ``request_id`` with every turn but never says that the
trajectory ended. A session therefore ends when it has been silent for ``idle_s`` seconds
(above the longest tool call you expect), when more than ``max_sessions`` are kept (the least
recently used goes first, as verl's own sticky cache does), or when the caller clears them
(``clear_sticky_cache``, new weights). A session with a turn running is never ended. Two turns
of one ``request_id`` at once get separate sessions. Keys are ``request_id.serial``.
Pure bookkeeping: callers pass ``now_s``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from tailsieve.errors import ConfigError


@dataclass(slots=True)
class Session:
    """One trajectory as the router keeps it."""

    key: str  # the gateway's session id
    group: int | None  # its GRPO group: a hash of its first prompt (siblings share it)
    running: bool = False  # a turn is running
    last_s: float = 0.0  # when its last turn began or ended


class SessionTable:
    """verl request ids to live sessions (module docstring). Sessions with a turn running are
    kept apart from the idle ones, so a turn's look for ended sessions reads only the oldest
    idle ones, however many turns run."""

    def __init__(self, idle_s: float, max_sessions: int) -> None:
        if not idle_s > 0 or max_sessions < 1:
            raise ConfigError("idle_s must be > 0 and max_sessions >= 1")
        self.idle_s = idle_s
        self.max_sessions = max_sessions
        self._idle: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._running: dict[str, Session] = {}
        self._live: dict[str, str] = {}  # verl request id -> its session's key
        self._serial = 0

    def __len__(self) -> int:
        return len(self._idle) + len(self._running)

    def begin(self, request_id: str, prompt_ids: Sequence[int], now_s: float) -> Session:
        """A turn of ``request_id`` begins: its session (a new one for a first turn, or when
        the one it had is running a turn or has ended). Keys are never reused, so the
        gateway's piece ids stay unique."""
        key = self._live.get(request_id)
        s = self._idle.pop(key, None) if key is not None else None
        if s is None:
            duplicate = key is not None and key in self._running
            self._serial += 1
            key = f"{request_id}.{self._serial}"
            s = Session(key, hash(tuple(prompt_ids)) if prompt_ids else None)
            if not duplicate:
                self._live[request_id] = key
        s.running, s.last_s = True, now_s
        self._running[s.key] = s
        return s

    def end(self, key: str, now_s: float) -> None:
        """The turn of session ``key`` ended."""
        s = self._running.pop(key, None)
        if s is None:
            return
        s.running, s.last_s = False, now_s
        self._idle[key] = s

    def expired(self, now_s: float) -> list[str]:
        """Keys of the sessions that ended now (silent too long, or too many); forgotten."""
        out: list[str] = []
        excess = len(self) - self.max_sessions
        for key, s in self._idle.items():
            if excess > 0 or now_s - s.last_s > self.idle_s:
                out.append(key)
                excess -= 1
            else:
                break  # ordered by last use: the rest are younger
        for key in out:
            self._forget(key)
        return out

    def clear_idle(self) -> list[str]:
        """Forget every session without a running turn; their keys."""
        out = list(self._idle)
        for k in out:
            self._forget(k)
        return out

    def _forget(self, key: str) -> None:
        del self._idle[key]
        rid = key.rsplit(".", 1)[0]
        if self._live.get(rid) == key:
            del self._live[rid]
