"""Mid-turn moves of the session gateway's running turns: the pure balancer
(``core.balancer``) over the session book, and what its moves are priced with.

With the ``tailsieve`` policy running turns move mid-turn (behind the balance gate,
``gateway_steps``): at once where the runner can interrupt a running piece
(``PieceInterrupter``: SGLang, streamed vLLM pieces; a turn then runs as one piece unless
``piece_tokens`` is given), else at the running piece's end; a streamed turn's piece
(``PieceStreamer``) is interrupted at once, keeping what it streamed. The book moves a turn
when its next piece starts on the destination.

Every ``BalanceSettings.interval_s`` of the gateway's clock (as the agentic simulator checks;
a turn's end brings no check sooner) the ``auto`` profile is refitted where that can change
the step, the book is told how far every running piece has come (the tokens it streamed, else
``core.progress_clock``'s estimate from the cost model), and the running turns are read from
it as one ``ReplicaLoad`` per replica (``SessionBook.balance_loads``, built by
``session.midturn.move_loads`` exactly as the agentic simulator builds its planner's: running
turns keyed by session id with their contexts, tool waits in their home's load, no move into a
replica without KV room, nor past what admission's reservations leave it, replicas with waiting
turns left out), priced over the same horizon as the simulator's (``session.midturn.move_horizon_s`` with
``SessionBook.session_horizon_s``); ``plan_moves`` picks the moves that save more than they
cost (the uncached prefix's prefill on the destination plus a seam; ``SessionBook.cached`` /
``cached_on`` say what is cached where). A turn whose last move has not taken effect yet is no
candidate (``waiting``). A crash of the checks' loop is logged, counted (``Tally.crashed``)
and kept in ``crash``: moves are off from then on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace

from tailsieve.core.balancer import Running, plan_moves
from tailsieve.core.progress_clock import ProgressClock, paces
from tailsieve.runtime.engine.pieces import PieceInterrupter, PieceRunner, PieceStreamer
from tailsieve.runtime.execution.check_timer import CheckTimer
from tailsieve.runtime.execution.profile import LiveProfile
from tailsieve.runtime.execution.turn_chain import RunningTurn
from tailsieve.runtime.sessions.admit import LiveAdmission
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.runtime.sessions.parts import GatewayParts
from tailsieve.runtime.sessions.tally import Tally
from tailsieve.session.midturn import move_horizon_s

log = logging.getLogger(__name__)

SPEED_PIECES = 16  # timed pieces per replica before a uniform fleet runs its turns whole


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check: the moves planned and how many were made."""

    num_planned: int
    num_made: int


class MidTurnMoves:
    """Moves the running ``turns`` (by session id, the gateway's) over the replicas of
    ``parts``' book while ``allowed()``; ``healthy``: the replicas in service (the health's own
    list; none out of service takes a move); ``now`` / ``elapsed``: the gateway's clock and the
    seconds since the step began (the horizon's origin)."""

    def __init__(self, config: GatewayConfig, runner: PieceRunner, parts: GatewayParts,
                 tally: Tally, profile: LiveProfile, turns: dict[Hashable, RunningTurn],
                 healthy: list[bool], now: Callable[[], float], elapsed: Callable[[], float],
                 allowed: Callable[[], bool], time_scale: float = 1.0,
                 admission: LiveAdmission | None = None) -> None:
        """``admission``: the gateway's admission by KV room (moves then go only where the
        reservations leave room, and take the moved session's reservation along)."""
        self.config = config
        self.admission = admission
        self.book = parts.book
        self.tally = tally
        self.profile = profile
        self.turns = turns
        self.healthy = healthy
        self.now = now
        self.elapsed = elapsed
        self.allowed = allowed
        self.num_replicas = len(healthy)
        self.interrupter = (runner if isinstance(runner, PieceInterrupter) and runner.interrupts
                            else None)  # moves take effect at once
        self.streamer = (runner if isinstance(runner, PieceStreamer) and runner.streams_sinks
                         else None)  # streams the pieces of turns with a sink
        self.progress = ProgressClock()  # unstreamed pieces' progress (``estimate_progress``)
        self.settings = config.balance  # each step's (``GatewaySteps``: the last step's time)
        self.num_checks = 0
        self.check_timer = CheckTimer(now, float("-inf"), time_scale)
        self.crash: str | None = None  # why the checks' loop ended

    # -- which turns move, in what pieces ----------------------------------------------------

    def pieces_pay(self, replica: int) -> bool:
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
        if not all(self.healthy):
            return True
        load = [v.num_in_flight for v in self.book.views(self.now())]
        return load[replica] > min(load) + max(2.0, 0.25 * sum(load) / len(load))

    def piece_tokens(self, moves: bool, streamed: bool = False) -> int | None:
        """The piece cap of a turn that may move mid-turn (``moves``; ``MoveSettings.piece_cap``:
        one piece where the runner interrupts pieces, unless ``piece_tokens`` is given). A turn
        that does not move, or is streamed (``streamed``: to its sink, by a runner that
        interrupts streamed pieces), runs as one piece."""
        if not moves or streamed:
            return None
        return self.config.move.piece_cap(self.interrupter is not None)

    # -- the checks ----------------------------------------------------------------------------

    def check(self) -> CheckResult:
        """One check: plan moves over the book's loads and make them."""
        now = self.check_timer.last_s = self.now()
        self.num_checks += 1
        self.estimate_progress(now)
        rooms = self.admission.rooms() if self.admission is not None else None
        loads = [replace(ld, running=_without(ld.running, self.waiting))
                 for ld in self.book.balance_loads(now, rooms)]
        s = self.settings
        horizon = move_horizon_s(s, self.elapsed(), self.book.session_horizon_s(now))
        moves = plan_moves(loads, horizon, s.seam_s, s.max_moves_per_check,
                           cached=self.book.cached, cached_on=self.book.cached_on)
        made = sum(1 for mv in moves if self.move(mv.key, mv.dst))
        return CheckResult(len(moves), made)

    async def loop_once(self) -> CheckResult:
        """Wait until a check is due (``interval_s`` after the last one, as the agentic
        simulator checks), then make it. An exception from the check propagates (``run`` logs it,
        counts it and turns moves off)."""
        await self.check_timer.until_due(self.settings.interval_s)
        return self.check()

    async def run(self) -> None:
        """The checks' loop; a crash is logged, counted and turns moves off."""
        try:
            while True:
                if not self.allowed() or not self.turns:
                    await asyncio.sleep(self.settings.interval_s * self.check_timer.time_scale)
                    continue
                await self.loop_once()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.crash = f"the mid-turn rebalancer crashed: {type(exc).__name__}: {exc}"
            self.tally.crashed()
            log.exception("session gateway: %s; moves are off from now on", self.crash)

    # -- what a check reads --------------------------------------------------------------------

    def refit_soon(self) -> None:
        """Refit once the caller's current callback is done (e.g. the step's last answer
        written: a refit takes tens to hundreds of ms of CPU), or now without a running loop."""
        try:
            asyncio.get_running_loop().call_soon(self.refit)
        except RuntimeError:
            self.refit()

    def refit(self, due_only: bool = False) -> None:
        """With ``auto``: price with the latest trusted fit of the pieces timed so far and
        each replica's own speed factor (at each step's start and end, and at a mid-turn
        check, ``due_only``, once enough pieces are new: ``LiveProfile.refit_due``)."""
        fitted = self.profile.refit(due_only)
        if fitted is not None:
            self.book.set_throughput(fitted, self.profile.speed_factors(range(self.num_replicas)))
            log.info("session gateway: the auto profile's fit of %d timed pieces prices "
                     "placements and moves from now on", self.profile.num_observations)

    def estimate_progress(self, now_s: float) -> None:
        """Before a check: refit the ``auto`` profile where a refit is due and can change the
        step (a running turn may move; else only once the fit's pieces have all turned over:
        on a uniform fleet whose turns run whole, the tens of ms of a refit would only take
        CPU from the pieces' relay), then tell the book how far each running
        piece has come: the tokens it streamed, else ``core.progress_clock``'s estimate (as
        the step's rebalancer), its paces set at each check."""
        if self.profile.turned_over or any(rt.moves for rt in self.turns.values()):
            self.refit(due_only=True)
        clock = self.progress
        clock.catch_up(now_s, lambda: self._paces(now_s))
        streamed = self.interrupter.generated_tokens if self.interrupter is not None else None
        oldest = now_s
        for rt in self.turns.values():
            r = rt.piece_on
            if r is None:
                continue
            oldest = min(oldest, rt.piece_started_s)
            if self.streams(rt):
                got: int | None = rt.streamed_tokens
            else:
                got = streamed(rt.piece_id) if streamed is not None else None
            if got is None:
                got = clock.piece_tokens(r, rt.piece_started_s, now_s, rt.cap_tokens)
            self.book.progress(rt.session_id, rt.chain.num_generated + got, now_s)
        clock.run_at(self._paces(now_s))
        clock.forget_before(oldest)

    def _paces(self, now_s: float) -> dict[int, float]:
        """Tokens per second of each running turn, by replica: one per decode iteration its
        cost model predicts at the book's load (``ProgressClock.run_at``)."""
        return paces((v.replica, v.config.throughput.step_s(max(v.num_in_flight, 1),
                                                            v.context_tokens))
                     for v in self.book.views(now_s))

    def streams(self, rt: RunningTurn) -> bool:
        """Whether the turn's pieces are streamed to its sink (and interrupted by closing)."""
        return rt.sink is not None and self.streamer is not None

    # -- the moves -------------------------------------------------------------------------------

    def waiting(self, session_id: Hashable) -> bool:
        """Whether the session has no turn that may move now (none, or its last move has not
        taken effect yet)."""
        rt = self.turns.get(session_id)
        return rt is None or not rt.movable

    def move(self, session_id: Hashable, dst: int) -> bool:
        """Send the turn's next piece to ``dst`` (the rebalancer's move), interrupting the
        running piece where the runner can."""
        rt = self.turns.get(session_id)
        if (rt is None or not rt.movable or dst == rt.replica or not self.healthy[dst]
                or not self.allowed()):
            return False
        self.send_on(rt, dst)
        return True

    def send_on(self, rt: RunningTurn, dst: int) -> None:
        """Send the turn's next piece to ``dst`` (any move's mechanics: the rebalancer's and
        verl's rebalance, ``gateway_rebalance``): its running piece ends at once where the
        runner can end it (a streamed piece by closing its stream, which keeps its tokens),
        else at its end."""
        stopper: PieceInterrupter | PieceStreamer | None = self.interrupter
        if self.streams(rt):
            stopper = self.streamer
        rt.moved(stopper is not None)
        rt.expect_hit = self.book.cached(rt.session_id, dst)
        self.tally.moved(rt.prefix_tokens - rt.expect_hit)
        rt.replica = dst
        if self.admission is not None:  # the reservation goes along now (the plan counted it)
            self.admission.placed(rt.session_id, dst, rt.prefix_tokens)
        if stopper is not None and rt.piece_on is not None:
            stopper.interrupt(rt.piece_on, rt.piece_id)


def _without(running: Callable[[], Running],
             waiting: Callable[[Hashable], bool]) -> Callable[[], Running]:
    got: list[Running] = []

    def read() -> Running:
        if not got:
            got.append([(k, n) for k, n in running() if not waiting(k)])
        return got[0]

    return read
