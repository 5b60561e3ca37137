"""TailSieve's router priced over the remaining-work estimate: a long context leaves a crowded
home only when its session is expected to live long enough to repay the re-prefill."""

from __future__ import annotations

from session_helpers import grounded_config, view

from tailsieve.session.remaining import RemainingWork
from tailsieve.session.routers import make_router
from tailsieve.session.settings import SessionSettings
from tailsieve.session.turn import TurnRequest

CONFIG = grounded_config()
VIEWS = [view(CONFIG, 0, 12, 40_000), view(CONFIG, 1, 8, 40_000)]
TURN = TurnRequest("s", "g", 3, 40_000, 500, 0, {0: 39_500})  # cached at home only


def _estimate(sibling_turns: int) -> RemainingWork:
    """Session ``s`` has ended 3 turns; its 7 siblings finished after ``sibling_turns``."""
    est = RemainingWork()
    est.start("s", "g")
    for _ in range(3):
        est.turn_ended("s", 300)
    for i in range(7):
        est.start(i, "g")
        for _ in range(sibling_turns):
            est.turn_ended(i, 300)
        est.session_ended(i)
    return est


def test_a_session_expected_to_end_soon_keeps_its_cached_home() -> None:
    settings = SessionSettings(expected_step_s=5000)
    short = make_router("tailsieve", settings, remaining_work=_estimate(4))
    long = make_router("tailsieve", settings, remaining_work=_estimate(40))
    blind = make_router("tailsieve", settings)
    assert not short.choose(TURN, VIEWS, 100.0).moved  # about one turn left: stay
    assert long.choose(TURN, VIEWS, 100.0).moved  # a long group: the move repays
    assert blind.choose(TURN, VIEWS, 100.0).moved  # "as many turns again" moves it too
