"""The live bookkeeping of sessions and replicas that every live router shares (pure).

The live runtime, verl's router plug-in and the HTTP proxy see the same events: a turn
arrives (``request``), is placed and starts (``start_turn``), reports progress or is moved by
continuation (``progress``, ``move_turn``), ends (``end_turn``: the session goes into a tool
call at that replica) and finally the session ends (``end_session``). From them the book keeps
what a router reads: per replica, the turns running and their contexts (a
``core.running_index.RunningIndex``, as a live step keeps its responses), the sessions waiting
on a tool whose home it is, prefills not yet done; per session, its context, home and turn;
and a ``PrefixCacheModel`` of what each replica's cache holds. ``views`` and ``balance_loads``
turn that into the inputs of ``place_turn`` / the routers and of ``core.balancer`` (the
latter by ``session.midturn``, as the agentic simulator builds them). A replica's turns
beyond its KV budget (in the order they started there, as an engine admits them) count as
waiting. A session waiting on a tool counts at its home only for the tool-wait horizon
fitted from the waits seen (``session.tool_wait``): an ended session the client never
announced stops pinning load there (it keeps its home and cache estimate); a caller that ends
every session turns that off (``lapse_tool_waits``). A session that asked for its next turn
counts at home until the turn starts (or is withdrawn, ``withdraw``), and its request says
whether it still counts there (``TurnRequest.in_tool_wait``: ``place_turn`` takes it off its
home's load only then). No clock: callers pass ``now_s``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

from tailsieve.core.balancer import ReplicaLoad
from tailsieve.core.running_index import RunningIndex
from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.midturn import move_loads, session_horizon_s
from tailsieve.session.replica_view import ReplicaView, ViewTable
from tailsieve.session.tool_wait import ToolWaitHorizon
from tailsieve.session.turn import TurnRequest

__all__ = ["SessionBook"]


@dataclass(slots=True)
class _Session:
    group_id: Hashable | None
    prompt_tokens: int  # its group's shared prompt
    context_tokens: int  # context at the end of its last turn (prompt of the next, less new)
    home: int | None = None  # replica of its last turn (None before the first)
    turn_index: int = -1  # of the turn requested or running
    requested_tokens: int = 0  # prompt of the turn requested or running
    replica: int | None = None  # where its turn runs (None: not running)
    generated: int = 0  # tokens its running turn generated so far
    unprefilled: int = 0  # of its running turn's prompt, tokens not yet prefilled
    started_s: float = 0.0
    in_tool: bool = False  # waiting on a tool at ``home`` (counted in its tool waits)
    tool_since_s: float | None = None  # when its last turn ended (its tool wait began)


@dataclass(slots=True)
class _Rep:
    num_tool: int = 0
    tool_context: float = 0.0
    backlog: float = 0.0  # tokens admitted, not yet prefilled
    healthy: bool = True


class _TauTable:
    """``tau(b)`` for whole ``b`` from a growing table (``ReplicaLoad.tau``)."""

    def __init__(self, config: ReplicaConfig) -> None:
        self._model = config.throughput
        self._table = self._model.taus(64).tolist()

    def __call__(self, b: int) -> float:
        if b >= len(self._table):
            self._table = self._model.taus(2 * b).tolist()
        return self._table[b]


class SessionBook:
    """The router's view of sessions and replicas, kept from events (pure)."""

    def __init__(self, configs: Sequence[ReplicaConfig], cache: PrefixCacheModel) -> None:
        if not configs:
            raise ConfigError("a session book needs at least one replica")
        if cache.num_replicas != len(configs):
            raise ConfigError(f"prefix cache has {cache.num_replicas} replicas, the book "
                              f"{len(configs)}")
        self.configs = list(configs)
        self._base = list(configs)  # as configured (``set_throughput`` scales these)
        self.cache = cache
        self._reps = [_Rep() for _ in configs]
        self._running = RunningIndex()  # running turns by replica, in the order they started
        # there, each with its context (prompt + generated so far)
        self._sessions: dict[Hashable, _Session] = {}
        self._taus = [_TauTable(c) for c in configs]
        self.tool_wait_weight = 1.0  # how much a session in a tool call counts in the
        # mid-turn loads (``SessionSettings.tool_wait_weight``, as ``place_turn`` weighs it)
        self.tool_waits = ToolWaitHorizon()  # how long a tool wait counts as load
        self.lapse_tool_waits = True  # False: a tool wait counts until the session's next
        # turn or end (a caller that ends every session: ``AgenticRollout``)
        self._in_tool: dict[Hashable, float] = {}  # sessions counted in tool waits -> since
        self._num_turns = 0
        self._sum_output = 0
        self._table: ViewTable | None = None  # the views of the last ``views`` call
        self._dirty: set[int] = set()  # replicas changed since then

    def set_throughput(self, model: ThroughputModel,
                       speeds: Sequence[float] | None = None) -> None:
        """Price every replica's decode with ``model`` from now on (the live ``auto`` profile
        refits it between steps); capacities and prefill costs stay as configured.
        ``speeds[r]``: replica ``r``'s own speed factor (``model.replica_speeds``): its decode
        and prefill cost that many times ``model``'s and the configured prefill (default: 1
        for every replica)."""
        if speeds is not None and len(speeds) != len(self.configs):
            raise ConfigError(f"{len(speeds)} speed factors for {len(self.configs)} replicas")
        if speeds is not None and not all(math.isfinite(f) and f > 0 for f in speeds):
            raise ConfigError(f"speed factors must be finite and > 0, got {list(speeds)}")
        self.configs = [replace(c, throughput=model).scaled(f) for c, f in zip(
            self._base, speeds if speeds is not None else [1.0] * len(self._base), strict=True)]
        self._taus = [_TauTable(c) for c in self.configs]
        self._table = None

    # ----- events --------------------------------------------------------------------
    def request(self, session_id: Hashable, group_id: Hashable | None, context_tokens: int,
                prompt_tokens: int | None = None, max_tokens: int | None = None) -> TurnRequest:
        """A turn arrives with a prompt of ``context_tokens``; returns what a router reads
        (home, new tokens, cached prefixes). ``prompt_tokens``: the group's shared prompt
        (default: the first turn's whole prompt)."""
        s = self._sessions.get(session_id)
        if s is None:
            prompt = context_tokens if prompt_tokens is None else prompt_tokens
            if not 0 <= prompt <= context_tokens:
                raise ConfigError(f"session {session_id!r}: prompt_tokens must be in "
                                  f"[0, {context_tokens}], got {prompt}")
            s = self._sessions[session_id] = _Session(group_id, prompt, 0)
        if s.replica is not None:
            raise ConfigError(f"session {session_id!r}: a turn is still running on replica "
                              f"{s.replica}")
        s.turn_index += 1
        s.requested_tokens = context_tokens
        if s.in_tool:  # back from its tool: it counts at home until its turn starts
            self._in_tool.pop(session_id, None)
        new = context_tokens - s.context_tokens if context_tokens >= s.context_tokens else (
            context_tokens)
        return TurnRequest(session_id, s.group_id, s.turn_index, context_tokens, new, s.home,
                           self.cache.cached_on(session_id, s.group_id, context_tokens),
                           max_tokens, s.in_tool)

    def withdraw(self, session_id: Hashable) -> None:
        """The requested turn will not start (no replica took it, or its caller gave up):
        the session stands as before its request. A session that never ran a turn is
        forgotten; a later one's tool wait lapses again with the horizon, from when it
        began."""
        s = self._sessions.get(session_id)
        if s is None or s.replica is not None:
            return
        if s.home is None:
            del self._sessions[session_id]
            return
        s.turn_index -= 1
        if s.in_tool and s.tool_since_s is not None and session_id not in self._in_tool:
            self._in_tool[session_id] = s.tool_since_s
            self._in_tool = dict(sorted(self._in_tool.items(), key=lambda kv: kv[1]))

    def start_turn(self, session_id: Hashable, replica: int, now_s: float) -> None:
        """The requested turn starts on ``replica``."""
        s = self._session(session_id)
        self._check_replica(replica)
        if s.replica is not None:
            raise ConfigError(f"session {session_id!r}: its turn already runs on {s.replica}")
        self._leave_tool(session_id, s)
        if s.tool_since_s is not None:
            self.tool_waits.observe(max(now_s - s.tool_since_s, 0.0))
            s.tool_since_s = None
        cached = self.cache.cached(replica, session_id, s.group_id, s.requested_tokens)
        self.cache.release(replica, session_id)
        s.replica, s.generated, s.started_s = replica, 0, now_s
        s.unprefilled = s.requested_tokens - cached
        self._running.add(session_id, replica, s.requested_tokens, s.prompt_tokens, ())
        self._reps[replica].backlog += s.unprefilled
        self._dirty.add(replica)
        self._fit_cache(replica)

    def progress(self, session_id: Hashable, generated_tokens: int, now_s: float) -> None:
        """The running turn has generated ``generated_tokens`` so far (its prefill is done)."""
        s = self._session(session_id)
        if s.replica is None:
            raise ConfigError(f"session {session_id!r}: no turn is running")
        self._running.set_known(session_id, s.requested_tokens + generated_tokens, s.prompt_tokens)
        self._reps[s.replica].backlog -= s.unprefilled
        s.generated, s.unprefilled = generated_tokens, 0
        self._dirty.add(s.replica)
        self._fit_cache(s.replica)

    def move_turn(self, session_id: Hashable, dst: int, now_s: float) -> None:
        """The running turn continues on ``dst`` (its prefix stays cached where it ran)."""
        s = self._session(session_id)
        self._check_replica(dst)
        if s.replica is None:
            raise ConfigError(f"session {session_id!r}: no turn is running to move")
        src = s.replica
        held = s.requested_tokens + s.generated
        self._stop(session_id, s)
        if self._reps[src].healthy:
            self.cache.insert(src, session_id, s.group_id, min(s.prompt_tokens, held), held)
        cached = self.cache.cached(dst, session_id, s.group_id, held)
        self.cache.release(dst, session_id)
        s.replica, s.unprefilled = dst, held - cached
        self._running.add(session_id, dst, held, s.prompt_tokens, ())
        self._reps[dst].backlog += s.unprefilled
        self._dirty.add(dst)
        self._fit_cache(dst)

    def end_turn(self, session_id: Hashable, output_tokens: int, now_s: float) -> None:
        """The running turn ended with ``output_tokens``; the session waits on a tool at the
        replica it ran on (its home from now on)."""
        s = self._session(session_id)
        if s.replica is None:
            raise ConfigError(f"session {session_id!r}: no turn is running to end")
        if output_tokens < 0:
            raise ConfigError(f"session {session_id!r}: output_tokens must be >= 0")
        r = s.replica
        self._stop(session_id, s)
        s.context_tokens = s.requested_tokens + output_tokens
        s.home = r
        self._num_turns += 1
        self._sum_output += output_tokens
        rep = self._reps[r]
        if rep.healthy:
            self.cache.insert(r, session_id, s.group_id, min(s.prompt_tokens, s.context_tokens),
                              s.context_tokens)
        rep.num_tool += 1
        rep.tool_context += s.context_tokens
        s.in_tool, s.tool_since_s = True, now_s
        self._in_tool[session_id] = now_s

    def end_session(self, session_id: Hashable) -> None:
        """The session ended (after its last turn, or abandoned)."""
        s = self._sessions.pop(session_id, None)
        if s is None:
            return
        if s.replica is not None:
            self._stop(session_id, s)
        self._leave_tool(session_id, s)
        self.cache.discard(session_id)

    def set_healthy(self, replica: int, healthy: bool) -> None:
        """A replica failed (its cache is lost) or came back."""
        self._check_replica(replica)
        self._reps[replica].healthy = healthy
        self._dirty.add(replica)
        if not healthy:
            self.cache.drop_replica(replica)

    # ----- reads ---------------------------------------------------------------------
    def views(self, now_s: float) -> ViewTable:
        """Every replica as ``place_turn`` and the routers read it: its turns beyond its KV
        budget, in the order they started there, are waiting; tool waits older than the
        tool-wait horizon no longer count. One table kept from call to call, its views
        rebuilt only for the replicas an event changed since the last call (so the table a
        call returns changes at the next one; copy it to keep it)."""
        if self.lapse_tool_waits:
            self._lapse_tool_waits(now_s)
        table = self._table
        if table is None:
            table = self._table = ViewTable([self._view(r, rep)
                                             for r, rep in enumerate(self._reps)])
        else:
            for r in self._dirty:
                table[r] = self._view(r, self._reps[r])
        self._dirty.clear()
        return table

    def balance_loads(self, now_s: float,
                      rooms: Sequence[float] | None = None) -> list[ReplicaLoad]:
        """The loads of ``core.balancer.plan_moves`` for mid-turn moves
        (``session.midturn.move_loads``): per replica where no turn waits, its running turns
        keyed by session id with their contexts (prompt + generated), the sessions in a tool
        call whose home it is, whether it takes moves (healthy, KV room), the context it may
        take (``rooms``, admission's; None: no bound); pass ``self.cached`` and
        ``self.cached_on`` as its ``cached`` / ``cached_on``."""
        running = [self._running.running_on(r) for r in range(len(self._reps))]
        return move_loads(self.views(now_s), running, self._taus, self.tool_wait_weight, rooms)

    def session_horizon_s(self, now_s: float) -> float:
        """How long a mid-turn move made now is expected to keep paying
        (``session.midturn.session_horizon_s`` over the running turns)."""
        turns = [s.turn_index for s in self._sessions.values() if s.replica is not None]
        return session_horizon_s(turns, self.expected_turn_tokens, self.views(now_s))

    def cached(self, session_id: Hashable, replica: int) -> int:
        """Prefix tokens of the session's running context cached on ``replica``."""
        s = self._sessions.get(session_id)
        if s is None:
            return 0
        held = s.requested_tokens + s.generated if s.replica is not None else s.context_tokens
        return self.cache.cached(replica, session_id, s.group_id, held)

    def cached_on(self, session_id: Hashable) -> Mapping[int, int]:
        """``{replica: cached(session_id, replica)}`` where above 0."""
        s = self._sessions.get(session_id)
        if s is None:
            return {}
        held = s.requested_tokens + s.generated if s.replica is not None else s.context_tokens
        return self.cache.cached_on(session_id, s.group_id, held)

    def home(self, session_id: Hashable) -> int | None:
        """The replica of the session's running turn, or of its last one."""
        s = self._sessions.get(session_id)
        if s is None:
            return None
        return s.replica if s.replica is not None else s.home

    @property
    def expected_turn_tokens(self) -> float:
        """Mean output of the turns ended so far (0 before any)."""
        return self._sum_output / self._num_turns if self._num_turns else 0.0

    @property
    def num_sessions(self) -> int:
        return len(self._sessions)

    # ----- internals -----------------------------------------------------------------
    def _session(self, session_id: Hashable) -> _Session:
        s = self._sessions.get(session_id)
        if s is None:
            raise ConfigError(f"unknown session {session_id!r} (request() a turn first)")
        return s

    def _check_replica(self, replica: int) -> None:
        if not 0 <= replica < len(self._reps):
            raise ConfigError(f"no replica {replica} (replicas 0..{len(self._reps) - 1})")

    def _view(self, r: int, rep: _Rep) -> ReplicaView:
        cfg = self.configs[r]
        running, known = self._running.load(r)
        n, ctx = running, float(known)
        cap = cfg.kv_capacity_tokens
        if cap is not None and ctx > cap:
            n, ctx = 0, 0.0
            for _, held in self._running.running_on(r):
                if n and ctx + held > cap:
                    break
                n, ctx = n + 1, ctx + held
        return ReplicaView(r, cfg, n, ctx, running - n, rep.num_tool,
                           max(rep.tool_context, 0.0), max(rep.backlog, 0.0), rep.healthy)

    def _stop(self, session_id: Hashable, s: _Session) -> None:
        assert s.replica is not None
        self._running.remove(session_id)
        self._reps[s.replica].backlog -= s.unprefilled
        self._dirty.add(s.replica)
        s.replica, s.unprefilled = None, 0

    def _leave_tool(self, session_id: Hashable, s: _Session) -> None:
        if s.in_tool and s.home is not None:
            rep = self._reps[s.home]
            rep.num_tool -= 1
            rep.tool_context -= s.context_tokens
            self._dirty.add(s.home)
            s.in_tool = False
            self._in_tool.pop(session_id, None)

    def _lapse_tool_waits(self, now_s: float) -> None:
        """Tool waits older than the horizon stop counting (oldest first: ``_in_tool`` is in
        the order the waits began)."""
        horizon = self.tool_waits.horizon_s
        while self._in_tool:
            sid, since = next(iter(self._in_tool.items()))
            if now_s - since < horizon:
                break
            self._leave_tool(sid, self._sessions[sid])

    def _fit_cache(self, replica: int) -> None:
        cap = self.configs[replica].kv_capacity_tokens
        if cap is not None:
            self.cache.set_capacity(replica, int(cap - self._running.load(replica)[1]))

