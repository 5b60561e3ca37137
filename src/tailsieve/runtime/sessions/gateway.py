"""``SessionGateway``: multi-turn sessions over live replicas, placed, pieced, moved and healed.

::

    runner = HttpPieceRunner(endpoints)                   # or the verl helper's Ray runner
    async with SessionGateway(len(endpoints), runner, GatewayConfig()) as gw:
        out = await gw.generate("traj-7", "prompt-3", prompt_ids, {"temperature": 1.0},
                                max_tokens=512)           # one turn: a joined chain of pieces
        ...                                               # the tool runs; the next turn's
        out = await gw.generate("traj-7", "prompt-3", prompt_ids + out.token_ids + obs, ...)
        gw.end_session("traj-7")
        gw.stats()

Each turn is placed by the policy's ``SessionRouter`` (``session.routers``) over the
``SessionBook`` (``session.book``, kept from the gateway's events) and runs as a chain of
pieces (``turn_chain``, run by ``piece_loop``; joined by ``runtime.chain``). With the
``tailsieve`` policy running turns move mid-turn (``midturn``; behind the balance gate): at
once where the runner can interrupt a running piece (``PieceInterrupter``: SGLang, streamed
vLLM pieces; a turn then runs as one piece unless ``piece_tokens`` is given), else at the running piece's end. A turn
generated for a streamed answer (``on_tokens``) runs, where the runner streams pieces
(``PieceStreamer``), as one streamed piece that a move interrupts at once (where its text is
whole); its tokens reach ``on_tokens`` as they come, each once: a moved or relocated turn's
next piece streams on from the last one sent, and a turn that would have to start again after
streaming (continuation off, penalties, a text prompt whose ids no server echoed) fails. The
book moves a turn when its next piece starts on the destination. A replica that fails
(``runtime.faults``: unreachable, its engine died, a stream cut, or hung: no progress for
longer than its cost model expects, ``runtime.stall_watch``) is taken out (probed every
``probe_interval_s`` when the runner can probe) and each turn running there continues on a
healthy replica from its last seam (a streamed piece keeps what it streamed): nothing is lost
or generated twice. A crash of the mid-turn rebalancer is logged, counted in
``stats().rebalancer_crashes`` and turns moves off (``moves_off_reason``); it never passes
silently and never fails a turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tailsieve.control.balance_gate import BalanceGate
from tailsieve.core.progress_clock import ProgressClock, paces
from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.backends import Backend, SamplingParams
from tailsieve.runtime.chain import ChainError, penalties_of
from tailsieve.runtime.health import Probe, ReplicaHealth
from tailsieve.runtime.sessions.admit import LiveAdmission
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.runtime.sessions.http_runner import HttpPieceRunner
from tailsieve.runtime.sessions.midturn import MidTurnRebalancer
from tailsieve.runtime.sessions.parts import GatewayParts, Placement, build_parts
from tailsieve.runtime.sessions.piece_loop import PieceOwner, run_pieces
from tailsieve.runtime.sessions.pieces import (
    HealthProbe,
    PieceInterrupter,
    PieceOutput,
    PieceRequest,
    PieceRunner,
    PieceStreamer,
    sampling_from_dict,
)
from tailsieve.runtime.sessions.profile import LiveProfile
from tailsieve.runtime.sessions.result import GatewayStats, PieceSpan, TurnResult
from tailsieve.runtime.sessions.tally import Tally
from tailsieve.runtime.sessions.turn_chain import RunningTurn, TurnSink
from tailsieve.runtime.stall_watch import StallWatch
from tailsieve.runtime.tasks import BackgroundTask
from tailsieve.runtime.transport import ReplicaDownError, Transport
from tailsieve.session.routers import SessionPolicy, TailSieveRouter
from tailsieve.session.turn import TurnRequest

log = logging.getLogger(__name__)

T = TypeVar("T")
SPEED_PIECES = 16  # timed pieces per replica before a uniform fleet runs its turns whole


class SessionGateway:
    """Routes the turns of many sessions over ``num_replicas`` replicas reached by ``runner``.

    ``parts``: the router, book and cost models (``build_parts(config, num_replicas)`` by
    default); ``clock``: seconds, monotonic (the event loop's by default)."""

    def __init__(
        self,
        num_replicas: int,
        runner: PieceRunner,
        config: GatewayConfig | None = None,
        parts: GatewayParts | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if num_replicas < 1:
            raise ConfigError(f"num_replicas must be >= 1, got {num_replicas}")
        self.config = config or GatewayConfig()
        self.num_replicas = num_replicas
        self.runner = runner
        self.parts = parts or build_parts(self.config, num_replicas)
        self.router, self.book = self.parts.router, self.parts.book
        self._clock = clock
        self._t0: float | None = None
        self._step_t0 = 0.0
        self.health = ReplicaHealth([f"replica {r}" for r in range(num_replicas)],
                                    _probe_of(runner), self.config.probe_interval_s,
                                    self.book.set_healthy)
        self._healthy = self.health.healthy  # the same list: read on every placement
        self._turns: dict[Hashable, RunningTurn] = {}
        self._num_turns: dict[Hashable, int] = {}  # session -> turns started
        self.tally = Tally(num_replicas)
        self.gate = BalanceGate()
        self.profile = LiveProfile(self.config.profile, self.config.fallback_profile)
        self._step_balanced = True
        self._last_step_s = 0.0  # the last step's time (0: none yet)
        self._crash: str | None = None
        self._task = BackgroundTask("session-rebalancer")
        self.stalls = StallWatch(self.config.stall, self._cost_of, self.now)  # hung replicas
        self._stall_task = BackgroundTask("stall-watch")
        self._owns_runner = False  # ``over_http``: the runner is closed with the gateway
        self.interrupter = (runner if isinstance(runner, PieceInterrupter) and runner.interrupts
                            else None)  # moves take effect at once
        self.streamer = (runner if isinstance(runner, PieceStreamer) and runner.streams_sinks
                         else None)  # streams the pieces of turns with a sink
        self.admission = LiveAdmission(self.config.kv_admission,
                                       self.config.policy is SessionPolicy.TAILSIEVE,
                                       num_replicas)  # new sessions by KV room
        self.progress = ProgressClock()  # unstreamed pieces' progress (``_estimate_progress``)
        self.rebalancer = MidTurnRebalancer(
            self.book, self.config.balance, self._move, self._waiting, self.now, self.elapsed,
            self._estimate_progress)
        self._pieces = _GatewayPieces(self)

    @classmethod
    def over_http(cls, endpoints: Sequence[str], config: GatewayConfig | None = None,
                  backend: Backend | str = Backend.VLLM, model: str | None = None,
                  transport: Transport | None = None,
                  clock: Callable[[], float] | None = None) -> SessionGateway:
        """A gateway over vLLM / SGLang servers at ``endpoints`` (an ``HttpPieceRunner``
        with the config's request timeout and streaming, closed with the gateway)."""
        cfg = config or GatewayConfig()
        if Backend(backend) is Backend.VLLM_CHAT:
            raise ConfigError("a session's pieces go to /v1/completions as token ids: use "
                              "backend 'vllm' (its chat template applied by the caller)")
        runner = HttpPieceRunner(endpoints, backend, model, transport,
                                 request_timeout_s=cfg.request_timeout_s, stream=cfg.stream,
                                 stream_interval=cfg.stream_interval)
        gw = cls(len(endpoints), runner, cfg, clock=clock)
        gw._owns_runner = True
        return gw

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> SessionGateway:
        self.now()
        self.admission.start(self.runner, self.config.kv_metrics_interval_s)  # engines' KV
        why = self.config.moves_off_reason
        if why is None:
            self._task.start(self._rebalance)
        else:
            log.info("session gateway: running turns do not move: %s", why)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the rebalancer and the probes (the runner is the caller's to close, but for
        ``over_http``'s)."""
        await self._task.aclose()
        await self._stall_task.aclose()
        await self.health.aclose()
        await self.admission.aclose()
        if self._owns_runner and isinstance(self.runner, HttpPieceRunner):
            await self.runner.aclose()

    # -- time --------------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the gateway started (the book's clock)."""
        t = self._clock() if self._clock is not None else asyncio.get_running_loop().time()
        if self._t0 is None:
            self._t0 = t
        return t - self._t0

    def elapsed(self) -> float:
        """Seconds since the current step began (``begin_step``; else since the start)."""
        return self.now() - self._step_t0

    def begin_step(self) -> bool:
        """A rollout step begins: the horizon restarts from the last step's time, and the
        balance gate says whether this step moves turns (as in the agentic simulator: a
        step it does not balance keeps TailSieve's sessions home and runs every turn as one
        piece). Returns whether running turns may move."""
        self._step_t0 = self.now()
        self._refit()
        if self.admission.begin_step(self.book.configs):
            log.info("session gateway: new sessions are admitted by KV room this step")
        self._step_balanced = not self.config.gate or self.gate.balances_next()
        last = self._last_step_s
        self.rebalancer.settings = replace(self.config.balance, expected_step_s=last)
        if isinstance(self.router, TailSieveRouter):
            base = self.parts.settings
            self.router.settings = replace(
                base, moves=base.moves and self._step_balanced, expected_step_s=last)
        return self.mid_turn_moves

    def set_step_balanced(self, balanced: bool) -> None:
        """Whether turns starting from now may move (with the gate on): for a caller that
        feeds the gate from its own windows of turns rather than steps (the proxy's
        ``PaceWindows``)."""
        self._step_balanced = not self.config.gate or balanced
        moves = self.parts.settings.moves and self._step_balanced
        if isinstance(self.router, TailSieveRouter) and self.router.settings.moves != moves:
            self.router.settings = replace(self.router.settings, moves=moves)  # once a change

    def end_step(self, observed_s: float, predicted_s: float) -> str:
        """A step ended after ``observed_s``; ``predicted_s``: what the caller's yardstick
        predicts for it without moves (the same yardstick every step). Feeds the gate;
        returns its note when its decision flips ("" otherwise)."""
        self._last_step_s = max(observed_s, 0.0)
        self._refit_soon()  # between steps, off the pieces' path (the next begin_step's cheap)
        if self.config.moves_off_reason is not None or self._crash is not None:
            return ""
        if not (predicted_s > 0 and observed_s > 0):
            return ""
        note = self.gate.observe(self._step_balanced, observed_s / predicted_s)
        if note:
            log.info("session gateway: %s", note)
        return note

    # -- the interface -------------------------------------------------------------------------

    @property
    def moves_off_reason(self) -> str | None:
        """Why running turns do not move now (None: they do)."""
        why = self.config.moves_off_reason or self._crash
        if why is None and not self._step_balanced:
            st = self.gate.state
            return ("the balance gate: steps with mid-turn moves measured slower than steps "
                    f"without ({len(st.balanced)} / {len(st.round_robin)} steps)")
        return why

    @property
    def mid_turn_moves(self) -> bool:
        return self.moves_off_reason is None

    async def generate(
        self,
        session_id: Hashable,
        group_id: Hashable | None,
        prompt_ids: Sequence[int],
        sampling: SamplingParams | Mapping[str, Any],
        max_tokens: int | None = None,
        prompt_tokens: int | None = None,
        on_piece: Callable[[PieceSpan, PieceOutput], None] | None = None,
        on_tokens: TurnSink | None = None,
        engine_args: Mapping[str, Any] | None = None,
        prompt_text: str | None = None,
        text_tokens: int = 1,
    ) -> TurnResult:
        """Generate one turn of ``session_id``: ``prompt_ids`` is its whole prompt (the
        context so far plus the new tokens); ``prompt_tokens``: the group's shared prompt
        prefix (first turn); ``max_tokens`` overrides the sampling's. ``on_piece`` is called
        with each piece as it ends (e.g. to stream it on; the returned ``TurnResult`` is the
        authority: a stop string spanning a seam cuts it shorter than its pieces);
        ``on_tokens`` with the turn's tokens as they come (see the module docstring);
        ``engine_args`` go with every piece to the runner (``PieceRequest.engine_args``).
        ``prompt_text`` instead of ``prompt_ids`` (empty): a prompt not tokenized yet, sent as
        text (the server tokenizes it and echoes its ids: ``TurnResult.prompt_ids``), placed
        as ``text_tokens`` long (an estimate). Raises
        ``RequestError`` when a server answers badly beyond retries, ``ReplicaError`` when no
        replica is healthy within ``no_replica_timeout_s``."""
        sp = sampling if isinstance(sampling, SamplingParams) else sampling_from_dict(sampling)
        if max_tokens is not None:
            sp = replace(sp, max_tokens=max_tokens)
        ids = tuple(map(int, prompt_ids))
        if not ids and not prompt_text:
            raise ConfigError(f"session {session_id!r}: empty prompt")
        if ids and prompt_text is not None:
            raise ConfigError(f"session {session_id!r}: give prompt_ids or prompt_text, not both")
        num_prompt = len(ids) if ids else max(1, text_tokens)
        if session_id in self._turns:
            raise ConfigError(f"session {session_id!r} already has a turn running")
        k = self._num_turns[session_id] = self._num_turns.get(session_id, 0) + 1
        req = self.book.request(session_id, group_id, num_prompt, prompt_tokens, sp.max_tokens)
        decision = await self.place(req)
        moves = self.mid_turn_moves and not penalties_of(sp)
        streamed = on_tokens is not None and self.streamer is not None
        moves = moves and (streamed or self._pieces_pay(decision.replica))
        rt = RunningTurn.start(session_id, f"{session_id}-t{k}", ids, sp, decision.replica,
                               self._piece_tokens(moves, streamed),
                               num_prompt - decision.prefill_tokens, moves, prompt_text,
                               num_prompt)
        rt.on_piece = on_piece
        rt.sink = on_tokens
        rt.engine_args = engine_args
        self._turns[session_id] = rt
        self.book.start_turn(session_id, decision.replica, self.now())
        self.tally.placed(decision, req)
        delivered = False
        try:
            await run_pieces(rt, self._pieces)
            delivered = True
        finally:
            del self._turns[session_id]
            self.turn_ended(session_id, rt.chain.num_generated, rt.replica)
            self.tally.ended(delivered)
            self.rebalancer.poke()
        return rt.result(decision.replica, decision.moved, decision.reason,
                         decision.prefill_tokens)

    def turn_ended(self, session_id: Hashable, output_tokens: int, replica: int) -> None:
        """The session's running turn ended on ``replica`` with ``output_tokens`` (for a turn
        the caller ran itself after ``place``, e.g. verl's whole turns)."""
        self.book.end_turn(session_id, output_tokens, self.now())
        self.admission.turn_ended(session_id, replica, output_tokens, self.now())

    def end_session(self, session_id: Hashable) -> None:
        """The session ended: its sticky state, cache estimates and KV reservation go."""
        self._num_turns.pop(session_id, None)
        self.book.end_session(session_id)
        self.router.forget(session_id)
        self.admission.ended(session_id)

    def set_healthy(self, replica: int, healthy: bool) -> None:
        """Take a replica out of service or return it (e.g. a framework removed a server)."""
        self.health.set(replica, healthy)

    def healthy(self) -> tuple[bool, ...]:
        return tuple(self._healthy)

    def stats(self) -> GatewayStats:
        return self.tally.stats(self.book.views(self.now()), self._healthy, len(self._turns),
                                self.rebalancer.num_checks, self.moves_off_reason)

    # -- placement -------------------------------------------------------------------------------

    async def place(self, req: TurnRequest) -> Placement:
        """Where turn ``req`` runs (also for turns the caller sends itself, e.g. verl's whole
        turns): the router's decision; a replica out of service is never chosen (the least
        loaded healthy one is: "home-down" when the router chose the session's home, else
        "fallback"). With admission by KV room on (``runtime.sessions.admit``), a new
        session waits here until a replica has room for it, and goes to one that has."""
        await self.health.wait_any(self.config.no_replica_timeout_s)
        adm = self.admission
        await adm.wait(req, self._healthy, self.now, lambda: self.book.tool_waits.horizon_s)
        views = self.book.views(self.now())
        home = req.home
        room = adm.room(req, self._healthy)
        d = Placement.of(self.router.choose(
            req, [v for v in views if v.replica in room] if room else views, self.elapsed()))
        if not self._healthy[d.replica]:
            why = "home-down" if d.replica == home else "fallback"
            d = self.parts.fallback(req, views, self._healthy, why)
        adm.placed(req.session_id, d.replica, req.context_tokens)
        return d

    def _pieces_pay(self, replica: int) -> bool:
        """Whether a turn placed on ``replica`` now may move mid-turn (and so, where the
        runner cannot interrupt a piece, runs in pieces, each end one more request and seam).
        With the default piece cap and the ``auto`` profile: only until every replica's own
        speed is fitted (``SPEED_PIECES`` timed pieces per replica), or where the fleet is not
        uniform: a replica priced at its own speed (a straggler), one out of service, or
        ``replica`` running ahead of the least loaded by more than ``max(2, a quarter of the
        mean)`` turns. On a uniform, balanced fleet no move is expected to pay, and a turn
        runs whole."""
        prof = self.profile
        if self.config.piece_tokens is not None or self.interrupter is not None:
            return True
        if (len(prof.speeds) < self.num_replicas
                or prof.num_observations < SPEED_PIECES * self.num_replicas):
            return True  # the replicas' speeds are not known yet
        if any(f != 1.0 for f in prof.speed_factors(range(self.num_replicas))):
            return True
        if not all(self._healthy):
            return True
        load = [v.num_in_flight for v in self.book.views(self.now())]
        return load[replica] > min(load) + max(2.0, 0.25 * sum(load) / len(load))

    def _piece_tokens(self, moves: bool, streamed: bool = False) -> int | None:
        """The piece cap of a turn that may move mid-turn (``moves``; ``MoveSettings.piece_cap``:
        one piece where the runner interrupts pieces, unless ``piece_tokens`` is given). A turn
        that does not move, or is streamed (``streamed``: to its sink, by a runner that
        interrupts streamed pieces), runs as one piece."""
        if not moves or streamed:
            return None
        return self.config.move.piece_cap(self.interrupter is not None)

    # -- running a turn ------------------------------------------------------------------------

    def _watch_stalls(self) -> None:
        self._stall_task.start(lambda: self.stalls.run(self._stalled, self._answers))

    async def watched(self, key: Hashable, replica: int, prompt_tokens: int, max_tokens: int,
                      call: Awaitable[T]) -> T:
        """Await ``call`` (a request the caller sends itself, e.g. a whole turn) under the
        stall watch: ``ReplicaStalledError`` when ``replica`` is found hung."""
        self._watch_stalls()
        return await self.stalls.watched(key, replica, prompt_tokens, max_tokens, call)

    async def _answers(self, replica: Hashable) -> bool:
        """A suspect replica answers the runner's probe (slow, not hung)."""
        return (isinstance(self.runner, HealthProbe) and isinstance(replica, int)
                and await self.runner.probe(replica))

    def _stalled(self, replica: Hashable, exc: ReplicaDownError) -> None:
        """The stall watch found ``replica`` hung: out of service until a probe answers."""
        if isinstance(replica, int):
            self.health.down(replica, exc)

    async def fail_over(self, session_id: Hashable, replica: int, exc: BaseException) -> int:
        """``replica`` failed under the session's turn (also one the caller runs, e.g. verl's
        whole turns): out until a probe answers; the turn goes to the least loaded healthy."""
        self.health.down(replica, exc)
        await self.health.wait_any(self.config.no_replica_timeout_s)
        dst = self.parts.least_loaded(self.book.views(self.now()), self._healthy)
        self.book.move_turn(session_id, dst, self.now())
        return dst

    # -- mid-turn moves ----------------------------------------------------------------------

    def _cost_of(self, replica: Hashable) -> ReplicaConfig:
        """The cost model a replica's pieces are priced with (the stall watch's): the book's,
        the ``auto`` profile's fit once trusted."""
        assert isinstance(replica, int)
        return self.book.configs[replica]

    def _refit_soon(self) -> None:
        """Refit once the caller's current callback is done (e.g. the step's last answer
        written: a refit takes tens to hundreds of ms of CPU), or now without a running loop."""
        try:
            asyncio.get_running_loop().call_soon(self._refit)
        except RuntimeError:
            self._refit()

    def _refit(self, due_only: bool = False) -> None:
        """With ``auto``: price with the latest trusted fit of the pieces timed so far and
        each replica's own speed factor (at each step's start and end, and at a mid-turn
        check, ``due_only``, once enough pieces are new: ``LiveProfile.refit_due``)."""
        fitted = self.profile.refit(due_only)
        if fitted is not None:
            self.book.set_throughput(fitted, self.profile.speed_factors(range(self.num_replicas)))
            log.info("session gateway: the auto profile's fit of %d timed pieces prices "
                     "placements and moves from now on", self.profile.num_observations)

    def _estimate_progress(self, now_s: float) -> None:
        """Before a check: refit the ``auto`` profile where a refit is due and can change the
        step (a running turn may move; else only once the fit's pieces have all turned over:
        on a uniform fleet whose turns run whole, the tens of ms of a refit would only take
        CPU from the pieces' relay), then tell the book how far each running
        piece has come: the tokens it streamed, else ``core.progress_clock``'s estimate (as
        the step's rebalancer), its paces set at each check."""
        if self.profile.turned_over or any(rt.moves for rt in self._turns.values()):
            self._refit(due_only=True)
        clock = self.progress
        clock.catch_up(now_s, lambda: self._paces(now_s))
        streamed = self.interrupter.generated_tokens if self.interrupter is not None else None
        oldest = now_s
        for rt in self._turns.values():
            r = rt.piece_on
            if r is None:
                continue
            oldest = min(oldest, rt.piece_started_s)
            got = streamed(rt.piece_id) if streamed is not None else None
            if self._streams(rt):
                got = rt.streamed_tokens
            if got is None:
                got = clock.piece_tokens(r, rt.piece_started_s, now_s, rt.cap_tokens)
            self.book.progress(rt.session_id, rt.chain.num_generated + got, now_s)
        clock.run_at(self._paces(now_s))
        clock.forget_before(oldest)

    def _paces(self, now_s: float) -> dict[int, float]:
        """Tokens per second of each running turn, by replica: one per decode iteration its
        cost model predicts at the book's load (``ProgressClock.run_at``)."""
        return paces((v.replica, v.config.throughput.tau(max(v.num_in_flight, 1))
                      + v.config.throughput.context_s_per_token * v.context_tokens)
                     for v in self.book.views(now_s))

    def _streams(self, rt: RunningTurn) -> bool:
        """Whether the turn's pieces are streamed to its sink (and interrupted by closing)."""
        return rt.sink is not None and self.streamer is not None

    def _waiting(self, session_id: Hashable) -> bool:
        rt = self._turns.get(session_id)
        return rt is None or not rt.movable

    def _move(self, session_id: Hashable, dst: int) -> bool:
        """Send the turn's next piece to ``dst`` (the rebalancer's move), interrupting the
        running piece where the runner can."""
        rt = self._turns.get(session_id)
        if (rt is None or not rt.movable or dst == rt.replica or not self._healthy[dst]
                or not self.mid_turn_moves):
            return False
        stopper: PieceInterrupter | PieceStreamer | None = self.interrupter
        if self._streams(rt):
            stopper = self.streamer  # a streamed piece: closing its stream keeps its tokens
        rt.moved(stopper is not None)
        rt.expect_hit = self.book.cached(session_id, dst)
        self.tally.moved(rt.prefix_tokens - rt.expect_hit)
        rt.replica = dst
        if stopper is not None and rt.piece_on is not None:
            stopper.interrupt(rt.piece_on, rt.piece_id)
        return True

    async def _rebalance(self) -> None:
        """The rebalancer's loop; a crash is logged, counted and turns moves off."""
        try:
            while True:
                if not self.mid_turn_moves or not self._turns:
                    await asyncio.sleep(self.config.balance.interval_s)
                    continue
                await self.rebalancer.loop_once()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._crash = f"the mid-turn rebalancer crashed: {type(exc).__name__}: {exc}"
            self.tally.crashed()
            log.exception("session gateway: %s; moves are off from now on", self._crash)


class _GatewayPieces(PieceOwner):
    """The gateway's side of its turns' loop of pieces (``piece_loop``): the book, the tally,
    moves taking effect, relocation and ``on_piece``."""

    keeps_empty = True  # a turn's result lists every piece it ran (a move's empty one too)

    def __init__(self, gw: SessionGateway) -> None:
        self.gw = gw
        self.max_empty_aborts = gw.config.max_empty_aborts

    def begin(self, rt: RunningTurn, piece: PieceRequest) -> PieceRequest:
        gw = self.gw
        if rt.begin_piece(gw.now()):  # a move takes effect
            gw.book.move_turn(rt.session_id, rt.replica, rt.piece_started_s)
        gw._watch_stalls()
        return piece

    async def send(self, rt: RunningTurn, piece: PieceRequest, replica: int,
                   ) -> tuple[PieceOutput | None, ReplicaDownError | None]:
        gw = self.gw
        return await rt.send(piece, gw.runner, replica, gw.stalls, gw.profile, gw.now, replica)

    def continues(self, rt: RunningTurn) -> bool:
        return self.gw.config.continuation and not penalties_of(rt.sampling)

    def take(self, rt: RunningTurn, replica: int, piece: PieceRequest, out: PieceOutput,
             fault: ReplicaDownError | None) -> None:
        self.gw.tally.piece(replica, piece, out, rt.expect_hit)
        rt.add(replica, piece, out)
        if rt.on_piece is not None:
            rt.on_piece(rt.spans[-1], out)

    def lost(self, rt: RunningTurn, fault: ReplicaDownError | None, dropped: int) -> None:
        """The gateway counts no waste. Dropped tokens that already reached the turn's
        ``on_tokens`` (a streamed answer) cannot be sent again unseen: the turn fails."""
        if dropped and rt.sink is not None and rt.streamed_tokens:
            raise ChainError(f"turn {rt.turn_id!r}: the server did not echo the text prompt's "
                             "token ids, so the turn cannot be continued after the tokens it "
                             "streamed")

    async def relocate(self, rt: RunningTurn, replica: int, fault: ReplicaDownError,
                       restart: bool) -> None:
        """Continue on a healthy replica from the last seam (or from the prompt). A turn that
        must start again after its tokens reached ``on_tokens`` (a streamed answer) fails
        (``ChainError``) once the replica is out: sent again, they would stream twice."""
        gw = self.gw
        streamed = rt.sink is not None and bool(rt.chain.num_generated or rt.streamed_tokens)
        if restart:
            rt.restart()
        rt.replica = rt.booked = await gw.fail_over(rt.session_id, replica, fault)
        rt.num_relocations += 1
        rt.expect_hit = gw.book.cached(rt.session_id, rt.replica)
        gw.tally.relocated(rt.prefix_tokens - rt.expect_hit)
        if restart and streamed:
            raise ChainError(f"turn {rt.turn_id!r}: its replica failed and it cannot be "
                             "continued (continuation off, or penalties), but its tokens have "
                             "been streamed: starting again would send them twice")

    def aborted(self, rt: RunningTurn, replica: int) -> Exception:
        return ReplicaError(f"turn {rt.turn_id}: {rt.empty_aborts} pieces in a row aborted by "
                            f"the server on replica {replica}")

    def after(self, rt: RunningTurn) -> None:
        if not rt.chain.done:
            self.gw.book.progress(rt.session_id, rt.chain.num_generated, self.gw.now())


def _probe_of(runner: PieceRunner) -> Probe | None:
    """The health probe of a runner that can probe (``HealthProbe``)."""
    if not isinstance(runner, HealthProbe):
        return None

    async def probe(replica: int) -> str:
        return "" if await runner.probe(replica) else "did not answer the health probe"
    return probe
