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
pieces (``turn_chain``, run by ``piece_loop``; joined by ``runtime.execution.chain``) on healthy
replicas (``gateway_pieces``: a replica that fails is taken out and each turn running there
continues elsewhere from its last seam, nothing lost or generated twice). With the
``tailsieve`` policy running turns move mid-turn (``gateway_moves``), in the steps the balance
gate balances (``gateway_steps``). A turn generated for a streamed answer (``on_tokens``) runs,
where the runner streams pieces (``PieceStreamer``), as one streamed piece that a move
interrupts at once (where its text is whole); its tokens reach ``on_tokens`` as they come, each
once: a moved or relocated turn's next piece streams on from the last one sent (a streamed
piece keeps what it streamed), and a turn that would have to start again after streaming
(continuation off, penalties, a text prompt whose ids no server echoed) fails. A crash of the
mid-turn checks is logged, counted in ``stats().rebalancer_crashes`` and turns moves off
(``moves_off_reason``); it never passes silently and never fails a turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import Backend, SamplingParams
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRunner, sampling_from_dict
from tailsieve.runtime.engine.transport import Transport
from tailsieve.runtime.execution.chain import penalties_of
from tailsieve.runtime.execution.model_clock import time_scale_of
from tailsieve.runtime.execution.piece_loop import run_pieces
from tailsieve.runtime.execution.profile import LiveProfile
from tailsieve.runtime.execution.result import GatewayStats, PieceSpan, TurnResult
from tailsieve.runtime.execution.turn_chain import RunningTurn, TurnSink
from tailsieve.runtime.sessions.admit import LiveAdmission
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.runtime.sessions.gateway_moves import MidTurnMoves
from tailsieve.runtime.sessions.gateway_pieces import GatewayPieces
from tailsieve.runtime.sessions.gateway_rebalance import AbortAndResume
from tailsieve.runtime.sessions.gateway_steps import GatewaySteps
from tailsieve.runtime.sessions.parts import GatewayParts, Placement, build_parts
from tailsieve.runtime.sessions.tally import Tally
from tailsieve.session.rebalance import VerlRebalance
from tailsieve.session.routers import SessionPolicy
from tailsieve.session.turn import TurnRequest

log = logging.getLogger(__name__)

T = TypeVar("T")


class SessionGateway:
    """Routes the turns of many sessions over ``num_replicas`` replicas reached by ``runner``.

    ``parts``: the router, book and cost models (``build_parts(config, num_replicas)`` by
    default); ``clock``: seconds, monotonic (the event loop's by default; a ``ModelClock``
    for replicas that run at a time scale: the checks then wait in its seconds)."""

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
        self._turns: dict[Hashable, RunningTurn] = {}
        self._num_turns: dict[Hashable, int] = {}  # session -> turns started
        self.tally = Tally(num_replicas)
        self.profile = LiveProfile(self.config.profile, self.config.fallback_profile)
        self._pieces = GatewayPieces(num_replicas, self.config, runner, self.parts, self.tally,
                                     self.profile, self.now)
        self.health, self.stalls = self._pieces.health, self._pieces.stalls
        self._healthy = self.health.healthy  # the same list: read on every placement
        self._owns_runner = False  # ``over_http``: the runner is closed with the gateway
        self.admission = LiveAdmission(self.config.kv_admission,
                                       self.config.policy is SessionPolicy.TAILSIEVE,
                                       num_replicas)  # new sessions by KV room
        self.moves = MidTurnMoves(self.config, runner, self.parts, self.tally, self.profile,
                                  self._turns, self._healthy, self.now, self.elapsed,
                                  lambda: self.mid_turn_moves, time_scale_of(clock),
                                  self.admission)
        self.steps = GatewaySteps(self.config, self.parts, self.moves)
        self.gate = self.steps.gate
        self.rebalance = (AbortAndResume(self.router, self.config, self.moves)
                          if isinstance(self.router, VerlRebalance) else None)

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

    async def __aenter__(self) -> SessionGateway:
        self.now()
        self.admission.start(self.runner, self.config.kv_metrics_interval_s)  # engines' KV
        self.steps.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the rebalancer and the probes (the runner is the caller's to close, but for
        ``over_http``'s)."""
        await self.steps.aclose()
        await self._pieces.aclose()
        await self.admission.aclose()
        if self._owns_runner and isinstance(self.runner, HttpPieceRunner):
            await self.runner.aclose()

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
        self.moves.refit()
        if self.admission.begin_step(self.book.configs):
            log.info("session gateway: new sessions are admitted by KV room this step")
        self.steps.begin_step()
        if self.rebalance is not None:
            self.rebalance.begin_step()
        return self.mid_turn_moves

    def set_step_balanced(self, balanced: bool) -> None:
        """Whether turns starting from now may move (with the gate on): for a caller that
        feeds the gate from its own windows of turns rather than steps (the proxy's
        ``PaceWindows``)."""
        self.steps.set_step_balanced(balanced)

    def end_step(self, observed_s: float, predicted_s: float) -> str:
        """A step ended after ``observed_s``; ``predicted_s``: what the caller's yardstick
        predicts for it without moves (the same yardstick every step). Feeds the gate;
        returns its note when its decision flips ("" otherwise)."""
        return self.steps.end_step(observed_s, predicted_s)

    @property
    def moves_off_reason(self) -> str | None:
        """Why running turns do not move now (None: they do)."""
        return self.steps.off_reason

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
        req, decision = await self.request_turn(session_id, group_id, num_prompt, prompt_tokens,
                                                sp.max_tokens)
        moves = self.mid_turn_moves and not penalties_of(sp)
        streamed = on_tokens is not None and self.moves.streamer is not None
        moves = moves and (streamed or self.moves.pieces_pay(decision.replica))
        cap = (self.moves.piece_tokens(moves, streamed) if self.rebalance is None
               else self.rebalance.piece_tokens(streamed))
        rt = RunningTurn.start(session_id, f"{session_id}-t{k}", ids, sp, decision.replica, cap,
                               num_prompt - decision.prefill_tokens, moves, prompt_text,
                               num_prompt)
        rt.on_piece = on_piece
        rt.sink = on_tokens
        rt.engine_args = engine_args
        self._turns[session_id] = rt
        self.book.start_turn(session_id, decision.replica, self.now())
        self.tally.placed(decision, req)
        self._after_event()
        delivered = False
        try:
            await run_pieces(rt, self._pieces)
            delivered = True
        finally:
            del self._turns[session_id]
            self.turn_ended(session_id, rt.chain.num_generated, rt.replica)
            self.tally.ended(delivered)
            self._after_event()
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
        self._after_event()

    def _after_event(self) -> None:
        """verl's rebalance (``verl-rebalance``) where the router asks for it now."""
        if self.rebalance is not None:
            self.rebalance.after_event()

    def set_healthy(self, replica: int, healthy: bool) -> None:
        """Take a replica out of service or return it (e.g. a framework removed a server)."""
        self.health.set(replica, healthy)

    def healthy(self) -> tuple[bool, ...]:
        return tuple(self._healthy)

    def stats(self) -> GatewayStats:
        return self.tally.stats(self.book.views(self.now()), self._healthy, len(self._turns),
                                self.moves.num_checks, self.moves_off_reason)

    async def watched(self, key: Hashable, replica: int, prompt_tokens: int, max_tokens: int,
                      call: Awaitable[T]) -> T:
        """Await ``call`` (a request the caller sends itself, e.g. a whole turn) under the
        stall watch: ``ReplicaStalledError`` when ``replica`` is found hung."""
        self._pieces.watch_stalls()
        return await self.stalls.watched(key, replica, prompt_tokens, max_tokens, call)

    async def fail_over(self, session_id: Hashable, replica: int, exc: BaseException) -> int:
        """``replica`` failed under the session's turn (also one the caller runs, e.g. verl's
        whole turns): out until a probe answers; the turn goes to the least loaded healthy."""
        return await self._pieces.fail_over(session_id, replica, exc)

    async def request_turn(self, session_id: Hashable, group_id: Hashable | None,
                           context_tokens: int, prompt_tokens: int | None = None,
                           max_tokens: int | None = None) -> tuple[TurnRequest, Placement]:
        """A turn of ``session_id`` arrives (``SessionBook.request``) and is placed
        (``place``; also for turns the caller sends itself, e.g. verl's whole turns). A turn
        no replica takes (none healthy within ``no_replica_timeout_s``), or whose caller gives
        up while it waits, is withdrawn from the book: its session stands as before."""
        req = self.book.request(session_id, group_id, context_tokens, prompt_tokens,
                                max_tokens)
        try:
            return req, await self.place(req)
        except BaseException:
            self.book.withdraw(session_id)
            raise

    async def place(self, req: TurnRequest) -> Placement:
        """Where turn ``req`` runs (``request_turn`` asks the book and calls it, also for turns
        the caller sends itself, e.g. verl's whole turns): the router's decision; a replica out
        of service is never chosen (the least loaded healthy one is: "home-down" when the
        router chose the session's home, else "fallback"). With admission by KV room on
        (``runtime.sessions.admit``), a new session waits here until a replica has room for
        it, and goes to one that has."""
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
