"""The session gateway's pieces on healthy replicas: its side of its turns' loop of pieces
(``piece_loop``: the book, the tally, moves taking effect, ``on_piece``), the replicas' health
and the fail-over of a turn whose replica fails.

A replica that fails (``runtime.engine.faults``: unreachable, its engine died, a stream cut, or hung:
no progress for longer than its cost model expects, ``runtime.execution.stall_watch``) is taken out
(``runtime.execution.health``: probed every ``probe_interval_s`` when the runner can probe, back in
service when it answers), and the turn running there continues on the least loaded healthy
replica (``fail_over``) from its last seam, or from its prompt where it cannot be continued.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from tailsieve.errors import ReplicaError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.engine.pieces import HealthProbe, PieceOutput, PieceRequest, PieceRunner
from tailsieve.runtime.engine.transport import ReplicaDownError
from tailsieve.runtime.execution.chain import ChainError, penalties_of
from tailsieve.runtime.execution.health import Probe, ReplicaHealth
from tailsieve.runtime.execution.piece_loop import PieceOwner
from tailsieve.runtime.execution.profile import LiveProfile
from tailsieve.runtime.execution.stall_watch import StallWatch
from tailsieve.runtime.execution.turn_chain import RunningTurn
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.runtime.sessions.parts import GatewayParts
from tailsieve.runtime.sessions.tally import Tally
from tailsieve.runtime.tasks import BackgroundTask


class GatewayPieces(PieceOwner):
    """Runs the gateway's pieces on the ``num_replicas`` replicas ``runner`` reaches, timed
    into ``profile``, kept in ``parts``' book and ``tally`` on the clock ``now``; ``health``
    (told to the book) and the stall watch over the running pieces (``stalls``, priced with
    the book's cost models) keep them on healthy replicas."""

    keeps_empty = True  # a turn's result lists every piece it ran (a move's empty one too)

    def __init__(self, num_replicas: int, config: GatewayConfig, runner: PieceRunner,
                 parts: GatewayParts, tally: Tally, profile: LiveProfile,
                 now: Callable[[], float]) -> None:
        self.config = config
        self.runner = runner
        self.parts = parts
        self.book = parts.book
        self.tally = tally
        self.profile = profile
        self.now = now
        self.max_empty_aborts = config.max_empty_aborts
        self._probe = _probe_of(runner)
        self.health = ReplicaHealth([f"replica {r}" for r in range(num_replicas)],
                                    self._probe, config.probe_interval_s, self.book.set_healthy)
        self.stalls = StallWatch(config.stall, self._cost_of, now)  # hung replicas
        self._stall_task = BackgroundTask("stall-watch")

    # -- faults ----------------------------------------------------------------------------

    def watch_stalls(self) -> None:
        """Run the stall watch (from the first watched piece on)."""
        self._stall_task.start(lambda: self.stalls.run(self._stalled, self._answers))

    def _cost_of(self, replica: Hashable) -> ReplicaConfig:
        """The cost model a replica's pieces are priced with (the stall watch's): the book's,
        the ``auto`` profile's fit once trusted."""
        assert isinstance(replica, int)
        return self.book.configs[replica]

    async def _answers(self, replica: Hashable) -> bool:
        """A suspect replica answers the runner's probe (slow, not hung)."""
        return self._probe is not None and isinstance(replica, int) and not await self._probe(
            replica)

    def _stalled(self, replica: Hashable, exc: ReplicaDownError) -> None:
        """The stall watch found ``replica`` hung: out of service until a probe answers."""
        if isinstance(replica, int):
            self.health.down(replica, exc)

    async def fail_over(self, session_id: Hashable, replica: int, exc: BaseException) -> int:
        """``replica`` failed under the session's turn: out until a probe answers; the turn
        goes to the least loaded healthy replica (returned)."""
        self.health.down(replica, exc)
        await self.health.wait_any(self.config.no_replica_timeout_s)
        now = self.now()
        dst = self.parts.least_loaded(self.book.views(now), self.health.healthy)
        self.book.move_turn(session_id, dst, now)
        return dst

    async def aclose(self) -> None:
        """Stop the stall watch and the probes."""
        await self._stall_task.aclose()
        await self.health.aclose()

    # -- the loop of pieces ------------------------------------------------------------------

    def begin(self, rt: RunningTurn, piece: PieceRequest) -> PieceRequest:
        if rt.begin_piece(self.now()):  # a move takes effect
            self.book.move_turn(rt.session_id, rt.replica, rt.piece_started_s)
        self.watch_stalls()
        return piece

    async def send(self, rt: RunningTurn, piece: PieceRequest, replica: int,
                   ) -> tuple[PieceOutput | None, ReplicaDownError | None]:
        return await rt.send(piece, self.runner, replica, self.stalls, self.profile, self.now,
                             replica)

    def continues(self, rt: RunningTurn) -> bool:
        return self.config.continuation and not penalties_of(rt.sampling)

    def take(self, rt: RunningTurn, replica: int, piece: PieceRequest, out: PieceOutput,
             fault: ReplicaDownError | None) -> None:
        self.tally.piece(replica, piece, out, rt.expect_hit)
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
        streamed = rt.sink is not None and bool(rt.chain.num_generated or rt.streamed_tokens)
        if restart:
            rt.restart()
        rt.replica = rt.booked = await self.fail_over(rt.session_id, replica, fault)
        rt.num_relocations += 1
        rt.expect_hit = self.book.cached(rt.session_id, rt.replica)
        self.tally.relocated(rt.prefix_tokens - rt.expect_hit)
        if restart and streamed:
            raise ChainError(f"turn {rt.turn_id!r}: its replica failed and it cannot be "
                             "continued (continuation off, or penalties), but its tokens have "
                             "been streamed: starting again would send them twice")

    def aborted(self, rt: RunningTurn, replica: int) -> Exception:
        return ReplicaError(f"turn {rt.turn_id}: {rt.empty_aborts} pieces in a row aborted by "
                            f"the server on replica {replica}")

    def after(self, rt: RunningTurn) -> None:
        if not rt.chain.done:
            self.book.progress(rt.session_id, rt.chain.num_generated, self.now())


def _probe_of(runner: PieceRunner) -> Probe | None:
    """The health probe of a runner that can probe (``HealthProbe``)."""
    if not isinstance(runner, HealthProbe):
        return None

    async def probe(replica: int) -> str:
        return "" if await runner.probe(replica) else "did not answer the health probe"
    return probe
