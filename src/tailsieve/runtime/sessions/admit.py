"""Admission of sessions by KV room at the live gateway: the simulator's rule, live.

The pure ``session.admission.KvAdmission`` keeps every replica's resident sessions and the KV
they reserve; ``session.admission.kv_bound`` says whether a step shaped like the last one is
KV-bound enough for admission to pay. ``LiveAdmission`` applies both at the gateway
(``SessionGateway.place``), as ``sim.agentic.run`` does in the simulator:

- at each step start (``begin_step``) it decides whether admission is on for the step:
  ``"auto"``: where ``kv_bound`` says so of the sessions seen since the previous step start
  (``StepShape``: the most sessions live at once, their turns' mean context and output, the
  mean context they ended at), for the ``tailsieve`` policy (the other policies are the
  baselines users run: they admit only with ``"on"``); ``"on"``: always; ``"off"``: never;
- while it is on, a *new* session (its first turn) is placed only on a replica whose resident
  sessions leave room for it, reserving ``max(context, the last step's mean final context)``
  tokens there until it ends; where no healthy replica has room it waits at the gateway,
  the waiting served in arrival order; a later turn never waits (it goes to its home or a
  replica with room; a turn moved off takes its reservation along at its end);
- a session ends when the caller says so (``ended``), or when its tool wait outlasts the
  book's tool-wait horizon (``session.tool_wait``: a client that never announces an end):
  its reservation is freed and the first waiting session admitted. A lapsed session that
  comes back is admitted again at once (it is no longer new);
- a session whose context fits no replica is admitted alone on an empty one
  (``KvAdmission.fits``): nothing waits for ever.

The engines' own account of their KV (``runtime.engine.engine_kv.KvPoller``, every
``GatewayConfig.kv_metrics_interval_s`` real seconds, while admission may be on: ``start``)
comes in through ``measure`` and goes to ``KvAdmission.measure`` (the KV size the engine
reports, the KV it measures in use, its preemptions); the KV size also prices ``kv_bound``.
A replica whose metrics cannot be read, or a runner that cannot read any, leaves the
decision to the book's model (logged once).

No future length is read. The first waiting session re-checks every ``POLL_S`` real seconds
(a lapse frees room without an event); those behind it wait for their turn without a timer
(a hundred sessions polling each cost the event loop a share of a core, which the
simulator does not model).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.engine.engine_kv import KvPoller
from tailsieve.session.admission import (
    AdmissionSettings,
    KvAdmission,
    KvReading,
    StepShape,
    kv_bound,
)
from tailsieve.session.turn import TurnRequest

__all__ = ["KV_ADMISSION_MODES", "LiveAdmission", "check_mode"]

KV_ADMISSION_MODES = ("auto", "on", "off")
POLL_S = 0.05  # real seconds between a waiting session's checks for a lapse


def check_mode(mode: str) -> str:
    """``mode`` if it is one of ``KV_ADMISSION_MODES``, else a ``ConfigError``."""
    if mode not in KV_ADMISSION_MODES:
        raise ConfigError(f"kv_admission must be one of {', '.join(KV_ADMISSION_MODES)}, got "
                          f"{mode!r}")
    return mode


@dataclass(slots=True)
class _Live:
    context_tokens: int  # prompt of its latest turn
    output_tokens: int = 0  # of its latest ended turn


class _Window:
    """What the sessions seen since the last step start showed (``StepShape``)."""

    def __init__(self, live_now: int = 0) -> None:
        self.peak = live_now
        self.turns = self.contexts = self.ended_turns = self.outputs = 0
        self.ended = 0
        self.finals = 0

    def shape(self) -> StepShape | None:
        if not self.ended or not self.turns:
            return None
        return StepShape(self.peak, self.contexts / self.turns, self.finals / self.ended,
                         self.outputs / max(self.ended_turns, 1))


class LiveAdmission:
    """The gateway's admission by KV room (see the module docstring)."""

    def __init__(self, mode: str, auto: bool, num_replicas: int) -> None:
        """``auto``: whether mode ``"auto"`` may turn it on (the policy admits)."""
        self.mode = check_mode(mode)
        self.auto = auto
        self.num_replicas = num_replicas
        self.kv: KvAdmission | None = None  # None: admission off this step
        self.shape: StepShape | None = None  # the last window's
        self._live: dict[Hashable, _Live] = {}
        self._in_tool: dict[Hashable, float] = {}  # session -> when its tool wait began
        self._queue: deque[Hashable] = deque()  # new sessions waiting, in arrival order
        self._wake: dict[Hashable, asyncio.Event] = {}
        self._window = _Window()
        self.num_waited = 0  # sessions that waited for room
        self.num_lapsed = 0  # reservations freed by the tool-wait horizon
        self.readings: list[KvReading | None] = [None] * num_replicas  # the engines' latest
        self.poller: KvPoller | None = None

    @property
    def may_admit(self) -> bool:
        """Whether admission can be on at all (mode ``on``, or ``auto`` for the policy)."""
        return self.mode == "on" or (self.mode == "auto" and self.auto)

    def start(self, runner: object, interval_s: float | None) -> None:
        """Read the engines' KV through ``runner`` every ``interval_s`` real seconds (None:
        never; the book's model alone), where admission may be on (call in the event loop)."""
        if interval_s is None or not self.may_admit or self.poller is not None:
            return
        self.poller = KvPoller.of(runner, self.num_replicas, self.measure, interval_s)
        if self.poller is not None:
            self.poller.start()

    async def aclose(self) -> None:
        if self.poller is not None:
            await self.poller.aclose()
            self.poller = None

    def measure(self, replica: int, reading: KvReading | None) -> None:
        """``replica``'s engine reported ``reading`` (None: it cannot be read)."""
        self.readings[replica] = reading
        if self.kv is not None:
            self.kv.measure(replica, reading)
            self._pump()

    def measured_configs(self, configs: Sequence[ReplicaConfig]) -> list[ReplicaConfig]:
        """``configs`` with each replica's KV size the engine's where it reported one."""
        return [c if r is None or r.capacity_tokens is None
                else replace(c, kv_capacity_tokens=r.capacity_tokens)
                for c, r in zip(configs, self.readings, strict=True)]

    @property
    def active(self) -> bool:
        return self.kv is not None

    @property
    def num_waiting(self) -> int:
        return len(self._queue)

    def begin_step(self, configs: Sequence[ReplicaConfig]) -> bool:
        """A step starts: decide from the last window whether sessions are admitted by KV
        room in it (returns that)."""
        shape = self._window.shape()
        if shape is not None:
            self.shape = shape
            self._window = _Window(len(self._live))
        configs = self.measured_configs(configs)
        on = self.mode == "on" or (self.mode == "auto" and self.auto and self.shape is not None
                                   and kv_bound(self.shape, configs))
        if not on:
            self.kv = None
            self._pump()
            return False
        expected = self.shape.final_context_tokens if self.shape is not None else 0.0
        old = self.kv
        self.kv = KvAdmission([c.kv_capacity_tokens for c in configs],
                              AdmissionSettings(1.0, expected))
        if old is not None:  # the sessions still live keep their place
            for sid, live in self._live.items():
                r = old.resident(sid)
                if r is not None:
                    self.kv.admit(sid, r, live.context_tokens)
        for r, reading in enumerate(self.readings):
            self.kv.measure(r, reading)
        return True

    async def wait(self, turn: TurnRequest, healthy: Sequence[bool], now: Callable[[], float],
                   horizon_s: Callable[[], float]) -> None:
        """Return when ``turn`` may be placed: at once unless admission is on and it is a new
        session's first turn with waiting sessions before it or no healthy replica with room."""
        sid = turn.session_id
        live = self._live.get(sid)
        if live is None:
            live = self._live[sid] = _Live(turn.context_tokens)
            self._window.peak = max(self._window.peak, len(self._live))
        live.context_tokens = turn.context_tokens
        self._in_tool.pop(sid, None)
        self._window.turns += 1
        self._window.contexts += turn.context_tokens
        self.lapse(now(), horizon_s())
        if self.kv is None or turn.turn_index > 0:
            return
        if not self._queue and self.room(turn, healthy):
            return
        self._queue.append(sid)
        ev = self._wake[sid] = asyncio.Event()
        self.num_waited += 1
        try:
            while self.kv is not None and not (self._queue[0] == sid
                                               and self.room(turn, healthy)):
                ev.clear()
                if self._queue[0] != sid:  # behind another: woken when it leaves the queue
                    await ev.wait()
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(POLL_S):
                        await ev.wait()
                self.lapse(now(), horizon_s())
        finally:
            self._queue.remove(sid)
            del self._wake[sid]
            self._pump()

    def rooms(self) -> list[float] | None:
        """Per replica, the context a turn moved mid-turn may bring (``KvAdmission.rooms``;
        None: admission off)."""
        return self.kv.rooms() if self.kv is not None else None

    def room(self, turn: TurnRequest, healthy: Sequence[bool]) -> list[int] | None:
        """The healthy replicas ``turn`` may go to: those with room for it and its session's
        resident one (None: any, admission off; [] none)."""
        if self.kv is None:
            return None
        home = self.kv.resident(turn.session_id)
        fits = self.kv.with_room(turn.context_tokens)
        return [r for r in range(self.num_replicas)
                if healthy[r] and (r == home or r in fits)]

    def placed(self, session_id: Hashable, replica: int, context_tokens: int) -> None:
        """The session's turn goes to ``replica``: it is resident there (a later turn's grown
        context grows its reservation)."""
        if self.kv is None:
            return
        if self.kv.resident(session_id) == replica:
            self.kv.grow(session_id, context_tokens)
        else:
            self.kv.admit(session_id, replica, context_tokens)

    def turn_ended(self, session_id: Hashable, replica: int, output_tokens: int,
                   now_s: float) -> None:
        """The session's turn ended on ``replica`` (where a move took it): its tool wait
        begins; a moved reservation follows it."""
        live = self._live.get(session_id)
        if live is None:
            return
        live.output_tokens = output_tokens
        self._window.ended_turns += 1
        self._window.outputs += output_tokens
        self._in_tool[session_id] = now_s
        if self.kv is not None and self.kv.resident(session_id) not in (None, replica):
            self.kv.admit(session_id, replica, live.context_tokens + output_tokens)

    def ended(self, session_id: Hashable) -> None:
        """The session ended (or lapsed): its reservation is freed, the waiting woken."""
        live = self._live.pop(session_id, None)
        self._in_tool.pop(session_id, None)
        if live is None:
            return
        self._window.ended += 1
        self._window.finals += live.context_tokens + live.output_tokens
        if self.kv is not None:
            self.kv.release(session_id)
        self._pump()

    def lapse(self, now_s: float, horizon_s: float) -> None:
        """Sessions whose tool wait outlasted ``horizon_s`` end here (oldest first)."""
        while self._in_tool:
            sid, since = next(iter(self._in_tool.items()))
            if now_s - since < horizon_s:
                break
            self.num_lapsed += 1
            self.ended(sid)

    def _pump(self) -> None:
        """Wake the first waiting session (all of them with admission off)."""
        for sid in (self._queue if self.kv is None else list(self._queue)[:1]):
            self._wake[sid].set()
