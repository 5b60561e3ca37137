"""Mid-turn moves of the session gateway's running turns, and what they are priced with.

With the ``tailsieve`` policy running turns move mid-turn (``midturn``; behind the balance
gate): at once where the runner can interrupt a running piece (``PieceInterrupter``: SGLang,
streamed vLLM pieces; a turn then runs as one piece unless ``piece_tokens`` is given), else at
the running piece's end; a streamed turn's piece (``PieceStreamer``) is interrupted at once,
keeping what it streamed. The book moves a turn when its next piece starts on the destination.
Before each check the rebalancer reads how far every running piece has come (the tokens it
streamed, else ``core.progress_clock``'s estimate from the cost model), and the ``auto``
profile's fit is refitted where that can change the step. The balance gate
(``control.balance_gate``), fed at each step's end, says whether the next step moves turns (a
step it does not balance keeps TailSieve's sessions home and runs every turn as one piece). A
crash of the rebalancer's loop is logged, counted (``Tally.crashed``) and kept in ``crash``:
moves are off from then on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from dataclasses import replace

from tailsieve.control.balance_gate import BalanceGate
from tailsieve.core.progress_clock import ProgressClock, paces
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.runtime.sessions.midturn import MidTurnRebalancer
from tailsieve.runtime.sessions.parts import GatewayParts
from tailsieve.runtime.sessions.pieces import PieceInterrupter, PieceRunner, PieceStreamer
from tailsieve.runtime.sessions.profile import LiveProfile
from tailsieve.runtime.sessions.tally import Tally
from tailsieve.runtime.sessions.turn_chain import RunningTurn
from tailsieve.runtime.tasks import BackgroundTask
from tailsieve.session.routers import TailSieveRouter

log = logging.getLogger(__name__)

SPEED_PIECES = 16  # timed pieces per replica before a uniform fleet runs its turns whole


class TurnMoves:
    """Moves the running ``turns`` (by session id, the gateway's) over the replicas of
    ``parts``' book; ``healthy``: the replicas in service (the health's own list); ``now`` /
    ``elapsed``: the gateway's clock and the seconds since the step began."""

    def __init__(self, config: GatewayConfig, runner: PieceRunner, parts: GatewayParts,
                 tally: Tally, profile: LiveProfile, turns: dict[Hashable, RunningTurn],
                 healthy: list[bool], now: Callable[[], float],
                 elapsed: Callable[[], float]) -> None:
        self.config = config
        self.parts = parts
        self.book = book = parts.book
        self.tally = tally
        self.profile = profile
        self.turns = turns
        self.healthy = healthy
        self.now = now
        self.num_replicas = len(healthy)
        self.interrupter = (runner if isinstance(runner, PieceInterrupter) and runner.interrupts
                            else None)  # moves take effect at once
        self.streamer = (runner if isinstance(runner, PieceStreamer) and runner.streams_sinks
                         else None)  # streams the pieces of turns with a sink
        self.progress = ProgressClock()  # unstreamed pieces' progress (``estimate_progress``)
        self.rebalancer = MidTurnRebalancer(book, config.balance, self.move, self.waiting, now,
                                            elapsed, self.estimate_progress)
        self.gate = BalanceGate()
        self.step_balanced = True
        self.last_step_s = 0.0  # the last step's time (0: none yet)
        self.crash: str | None = None  # why the rebalancer's loop ended
        self._task = BackgroundTask("session-rebalancer")

    # -- whether turns move ------------------------------------------------------------------

    @property
    def off_reason(self) -> str | None:
        """Why running turns do not move now (None: they do)."""
        why = self.config.moves_off_reason or self.crash
        if why is None and not self.step_balanced:
            st = self.gate.state
            return ("the balance gate: steps with mid-turn moves measured slower than steps "
                    f"without ({len(st.balanced)} / {len(st.round_robin)} steps)")
        return why

    def allowed(self) -> bool:
        return self.off_reason is None

    def start(self) -> None:
        """Run the rebalancer (unless the config turns moves off)."""
        why = self.config.moves_off_reason
        if why is None:
            self._task.start(self.run)
        else:
            log.info("session gateway: running turns do not move: %s", why)

    async def aclose(self) -> None:
        await self._task.aclose()

    def begin_step(self) -> None:
        """A step begins (``SessionGateway.begin_step``): the gate says whether it moves
        turns; moves are priced over the last step's time."""
        self.step_balanced = not self.config.gate or self.gate.balances_next()
        last = self.last_step_s
        self.rebalancer.settings = replace(self.config.balance, expected_step_s=last)
        router = self.parts.router
        if isinstance(router, TailSieveRouter):
            base = self.parts.settings
            router.settings = replace(
                base, moves=base.moves and self.step_balanced, expected_step_s=last)

    def set_step_balanced(self, balanced: bool) -> None:
        """``SessionGateway.set_step_balanced``."""
        self.step_balanced = not self.config.gate or balanced
        moves = self.parts.settings.moves and self.step_balanced
        router = self.parts.router
        if isinstance(router, TailSieveRouter) and router.settings.moves != moves:
            router.settings = replace(router.settings, moves=moves)  # once a change

    def end_step(self, observed_s: float, predicted_s: float) -> str:
        """``SessionGateway.end_step``."""
        self.last_step_s = max(observed_s, 0.0)
        self.refit_soon()  # between steps, off the pieces' path (the next begin_step's cheap)
        if self.config.moves_off_reason is not None or self.crash is not None:
            return ""
        if not (predicted_s > 0 and observed_s > 0):
            return ""
        note = self.gate.observe(self.step_balanced, observed_s / predicted_s)
        if note:
            log.info("session gateway: %s", note)
        return note

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
            got = streamed(rt.piece_id) if streamed is not None else None
            if self.streams(rt):
                got = rt.streamed_tokens
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
        stopper: PieceInterrupter | PieceStreamer | None = self.interrupter
        if self.streams(rt):
            stopper = self.streamer  # a streamed piece: closing its stream keeps its tokens
        rt.moved(stopper is not None)
        rt.expect_hit = self.book.cached(session_id, dst)
        self.tally.moved(rt.prefix_tokens - rt.expect_hit)
        rt.replica = dst
        if stopper is not None and rt.piece_on is not None:
            stopper.interrupt(rt.piece_on, rt.piece_id)
        return True

    async def run(self) -> None:
        """The rebalancer's loop; a crash is logged, counted and turns moves off."""
        try:
            while True:
                if not self.allowed() or not self.turns:
                    await asyncio.sleep(self.config.balance.interval_s)
                    continue
                await self.rebalancer.loop_once()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.crash = f"the mid-turn rebalancer crashed: {type(exc).__name__}: {exc}"
            self.tally.crashed()
            log.exception("session gateway: %s; moves are off from now on", self.crash)
