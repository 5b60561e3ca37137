"""The agentic simulator models the live gateway's mid-turn moves: at once (a running piece
interrupted) or at the running piece's end (``StepOptions.piece_tokens``), and its planner's
loads are the ones a ``SessionBook`` builds from the same state (``session.midturn``)."""

from __future__ import annotations

import numpy as np
import pytest

from tailsieve.core.balancer import BalanceSettings, ReplicaLoad
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.book import SessionBook
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.routers import make_router
from tailsieve.sim.agentic.step import StepOptions, TurnStepSim
from tailsieve.workload.turns import Trajectory, Turn

CFG = ReplicaConfig.from_profile(builtin_profile("qwen3-4b-h100"), prefill_s_per_token="profile")
CHECKS = BalanceSettings(interval_s=1.0, horizon_s=30.0, expected_step_s=60.0)


def crowd(n: int = 24, seed: int = 3) -> list[Trajectory]:
    rng = np.random.default_rng(seed)
    return [Trajectory(f"g{g}", 0, 3000, (
        Turn(int(rng.integers(200, 3000)), 0.2, 100), Turn(int(rng.integers(200, 3000)))))
        for g in range(n)]


class Recorder(TurnStepSim):
    """Records where each continuation starts (session, replica, tokens done) and every
    move decided (session, piece)."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.starts: list[tuple[int, int, int, int]] = []  # (session, from, to, done)
        self.decided: list[tuple[int, int, int]] = []  # (session, turn, piece)
        self._last = [-1] * len(self.trajs)

    def continue_on(self, i: int, r: int, t: float) -> None:
        self.starts.append((i, self._last[i], r, self.done_tokens[i]))
        super().continue_on(i, r, t)

    def sync(self, r: int, t: float) -> None:
        for i, w in enumerate(self.where):
            if w >= 0:
                self._last[i] = w
        super().sync(r, t)

    def check(self, t: float) -> None:
        before = dict(self.pending)
        moved = self.stats.midturn_moves
        super().check(t)
        if self.options.piece_tokens is not None:
            self.decided += [(i, self.turn[i], self.piece[i]) for i in self.pending
                             if i not in before]
        assert self.stats.midturn_moves >= moved


@pytest.mark.parametrize("piece_tokens", [None, 64])
def test_moves_take_effect_at_once_or_at_piece_ends(piece_tokens: int | None) -> None:
    opts = StepOptions(True, CHECKS, piece_tokens=piece_tokens)
    sim = Recorder(crowd(), [CFG] * 3, make_router("tailsieve"), opts)
    stats = sim.run()
    assert stats.midturn_moves > 0 and stats.num_turns == 48 and sim.left == 0
    moved = [(i, done) for i, src, dst, done in sim.starts if src != dst]
    assert moved
    if piece_tokens is None:  # stopped where it was: rarely on a piece boundary
        assert any(done % 64 for _, done in moved)
    else:  # every move waited for the running piece's end
        assert all(done % piece_tokens == 0 for _, done in moved)
        assert len(moved) <= len(sim.decided)  # a move pending at a turn's end is moot


def test_a_moved_turn_is_held_until_a_piece_ended_on_its_destination() -> None:
    sim = Recorder(crowd(36, 5), [CFG] * 4, make_router("tailsieve"),
                   StepOptions(True, BalanceSettings(interval_s=0.2, horizon_s=30.0,
                                                     expected_step_s=60.0), piece_tokens=32))
    sim.run()
    last: dict[tuple[int, int], int] = {}
    for i, turn, piece in sim.decided:
        if (i, turn) in last:
            assert piece >= last[(i, turn)] + 2
        last[(i, turn)] = piece
    assert len(last) < len(sim.decided)  # some turns moved twice


def test_pieces_alone_change_nothing_in_the_model() -> None:
    """On one replica nothing moves: a turn in pieces runs as long as in one go."""
    trajs = crowd(8)
    whole = TurnStepSim(trajs, [CFG], make_router("tailsieve"), StepOptions(True, CHECKS)).run()
    pieced = TurnStepSim(trajs, [CFG], make_router("tailsieve"),
                         StepOptions(True, CHECKS, piece_tokens=100)).run()
    assert pieced.step_s == pytest.approx(whole.step_s, rel=1e-6)
    with pytest.raises(ConfigError, match="piece_tokens"):
        StepOptions(piece_tokens=0)


class Mirror(TurnStepSim):
    """At its first check with turns running, builds a ``SessionBook`` holding the same
    running turns (their prompt and generated tokens) and tool waits, and keeps both the
    planner's loads and the book's."""

    got: tuple[list[ReplicaLoad], list[ReplicaLoad]] | None = None

    def check(self, t: float) -> None:
        for r in range(len(self.reps)):
            self.sync(r, t)
        assert self.planner is not None
        if self.got is None and any(e.num_running for e in self.reps.engines):
            book = SessionBook(self.reps.configs, PrefixCacheModel(
                [c.kv_capacity_tokens for c in self.reps.configs]))
            for r, e in enumerate(self.reps.engines):
                for (i, piece), held in e.running_contexts():
                    gen = e.tokens_so_far((i, piece))
                    book.request(i, None, held - gen)
                    book.start_turn(i, r, t)
                    book.progress(i, gen, t)
            for ev in self.events:
                i, home = ev[2], self.home[ev[2]]
                if ev[1] == 0 and home is not None:  # back from its tool at its home
                    book.request(i, None, self.context[i] - self.trajs[i].turns[
                        self.turn[i] - 1].tool_output_tokens)
                    book.start_turn(i, home, t)
                    book.end_turn(i, 0, t)
            self.got = (self.planner.loads(t), book.balance_loads(t))
        super().check(t)


def _summary(ld: ReplicaLoad, sim: bool) -> tuple[object, ...]:
    items = sorted((k[0] if sim else k, n) for k, n in ld.running())  # type: ignore[index]
    return (ld.replica, ld.num_running, ld.accepts, items, ld.context_s_per_token, ld.tau(3))


@pytest.mark.parametrize("seed", [1, 2])
def test_the_planner_s_loads_are_the_book_s(seed: int) -> None:
    """The simulator's planner (from its engines) and a ``SessionBook`` holding the same turns
    and tool waits build the same loads: the quantity live and simulated moves read."""
    rng = np.random.default_rng(seed)
    trajs = [Trajectory(f"g{g}", 0, int(rng.integers(500, 4000)), (
        Turn(int(rng.integers(50, 400)), float(rng.uniform(0.5, 3)), 100),
        Turn(int(rng.integers(200, 3000)), 1.0, 50), Turn(int(rng.integers(200, 3000)))))
        for g in range(30)]
    sim = Mirror(trajs, [CFG] * 3, make_router("turn-round-robin"),
                 StepOptions(True, BalanceSettings(interval_s=0.7, horizon_s=30.0)))
    sim.run()
    assert sim.got is not None
    planner, book = sim.got
    assert [_summary(ld, True) for ld in planner] == [_summary(ld, False) for ld in book]
    for p, b in zip(planner, book, strict=True):  # the engine counts fractions of a token
        assert p.context_tokens == pytest.approx(b.context_tokens, abs=len(b.running()))
        assert p.prefill_s_per_token == pytest.approx(b.prefill_s_per_token, rel=1e-3)
    assert any(ld.running() for ld in book) and sum(ld.num_running for ld in book) > sum(
        len(ld.running()) for ld in book)  # tool waits counted
