"""place_turn: TailSieve's priced stay-or-move decision."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from session_helpers import grounded_config, view

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.priced import place_turn
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.settings import SessionSettings
from tailsieve.session.turn import TurnRequest

CONFIG = grounded_config()


def _turn(context: int = 20000, new: int = 500, home: int | None = 0,
          cached: dict[int, int] | None = None, index: int = 3) -> TurnRequest:
    if cached is None:
        cached = {home: context - new} if home is not None else {}
    return TurnRequest("s", "g", index, context, new, home, cached)


def test_first_turn_goes_to_the_least_loaded_replica(config: ReplicaConfig) -> None:
    views = [view(config, 0, 30), view(config, 1, 5), view(config, 2, 20)]
    d = place_turn(_turn(2000, 2000, None, {}, 0), views, SessionSettings(), 0.0)
    assert d.replica == 1 and d.reason == "first" and not d.moved
    assert d.prefill_tokens == 2000 and d.predicted_gain_s == 0.0


def test_first_turn_prefers_a_cached_prompt_between_equal_replicas(
        config: ReplicaConfig) -> None:
    views = [view(config, r, 10) for r in range(4)]
    d = place_turn(_turn(3000, 3000, None, {2: 3000}, 0), views, SessionSettings(), 0.0)
    assert d.replica == 2 and d.prefill_tokens == 0


def test_stays_home_when_home_is_not_the_heavier(config: ReplicaConfig) -> None:
    views = [view(config, 0, 5), view(config, 1, 40), view(config, 2, 40)]
    d = place_turn(_turn(home=0), views, SessionSettings(), 60.0)
    assert d.replica == 0 and d.reason == "stay" and not d.moved and d.predicted_gain_s == 0


def test_moves_off_a_crowded_home_to_an_idle_replica(config: ReplicaConfig) -> None:
    views = [view(config, 0, 60, 30000), view(config, 1, 0), view(config, 2, 58, 30000)]
    d = place_turn(_turn(8000, 300, home=0), views, SessionSettings(expected_step_s=600), 30.0)
    assert d.replica == 1 and d.moved and d.reason == "move"
    assert d.saving_s >= 2.0 * d.move_prefill_s
    assert d.predicted_gain_s == pytest.approx(d.saving_s - d.move_prefill_s
                                               - SessionSettings().seam_s)
    assert d.prefill_tokens == 8000


def test_expensive_reprefill_keeps_a_long_context_home(config: ReplicaConfig) -> None:
    """A 100K-token context on a mildly heavier home: the re-prefill outweighs the saving."""
    views = [view(config, 0, 6, 60000), view(config, 1, 4, 60000)]
    d = place_turn(_turn(100_000, 400, home=0), views, SessionSettings(horizon_s=20.0), 5.0)
    assert d.reason == "stay"


def test_margin_zero_moves_when_margin_two_does_not(config: ReplicaConfig) -> None:
    views = [view(config, 0, 12, 20000), view(config, 1, 8, 20000)]
    turn = _turn(20000, 300, home=0)
    moves = [place_turn(turn, views, SessionSettings(move_margin=m, horizon_s=h), 0.0).moved
             for m in (0.0, 2.0) for h in (2.0, 5.0, 10.0, 20.0, 40.0, 80.0)]
    assert moves.count(True) > 0
    assert sum(moves[:6]) >= sum(moves[6:])


def test_default_seam_keeps_a_short_turn_home_on_a_slightly_heavier_replica(
        config: ReplicaConfig) -> None:
    """A search turn (2.5K tokens) whose home runs 68 sessions against another's 60: the
    predicted saving is one session's share of home's pace (about 0.1 s, as large as against
    an idle replica), which the default seam does not let through; without it, it moves."""
    turn = _turn(2500, 540, home=0)
    for other in (60, 0):
        views = [view(config, 0, 68, 2000), view(config, 1, other, 2000)]
        bare = place_turn(turn, views, SessionSettings(seam_s=0.0), 5.0, 150.0)
        assert bare.moved and bare.saving_s < 0.1
        assert place_turn(turn, views, SessionSettings(), 5.0, 150.0).reason == "stay"
    assert SessionSettings().seam_s == 0.1


def test_moves_off_switch(config: ReplicaConfig) -> None:
    views = [view(config, 0, 60, 30000), view(config, 1, 0)]
    d = place_turn(_turn(home=0), views, SessionSettings(moves=False, expected_step_s=600),
                   30.0)
    assert d.reason == "stay"


def test_dead_home_is_replaced(config: ReplicaConfig) -> None:
    views = [view(config, 0, 5, healthy=False), view(config, 1, 9), view(config, 2, 3)]
    d = place_turn(_turn(home=0), views, SessionSettings(), 10.0)
    assert d.replica == 2 and d.reason == "home-down" and d.moved


def test_no_healthy_replica_is_a_clear_error(config: ReplicaConfig) -> None:
    views = [view(config, 0, healthy=False)]
    with pytest.raises(ReplicaError, match="no healthy replica"):
        place_turn(_turn(), views, SessionSettings(), 0.0)


def test_tool_waits_count_as_load(config: ReplicaConfig) -> None:
    """Two replicas with the same running count: the one whose sessions are in tool calls
    (they come back) is the heavier."""
    views = [view(config, 0, 4, tool=30), view(config, 1, 4)]
    d = place_turn(_turn(2000, 2000, None, {}, 0), views, SessionSettings(), 0.0)
    assert d.replica == 1


@pytest.mark.parametrize("bad", [
    dict(move_margin=-1.0), dict(turn_tokens=0.0), dict(horizon_s=float("nan")),
    dict(tool_wait_weight=-0.5),
])
def test_settings_are_validated(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        SessionSettings(**bad)  # type: ignore[arg-type]


def test_turn_request_is_validated() -> None:
    with pytest.raises(ConfigError, match="new_tokens"):
        TurnRequest("s", None, 1, 100, 200, 0)
    with pytest.raises(ConfigError, match="cached_tokens"):
        TurnRequest("s", None, 1, 100, 10, 0, {1: 101})


_views = st.lists(
    st.tuples(st.integers(0, 80), st.integers(0, 60_000), st.integers(0, 40),
              st.integers(0, 60_000), st.booleans()),
    min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(_views, st.integers(1, 120_000), st.floats(0, 1), st.integers(-1, 5),
       st.floats(0.0, 4.0), st.floats(0.0, 1000.0), st.dictionaries(st.integers(0, 5),
                                                                     st.floats(0, 1)))
def test_a_move_always_pays_margin_times_its_prefill(
        raw: list[tuple[int, int, int, int, bool]], context: int, new_frac: float, home: int,
        margin: float, elapsed: float, cached_frac: dict[int, float]) -> None:
    views = [ReplicaView(r, CONFIG, b, float(b * c), 0, t, float(t * tc), healthy=ok)
             for r, (b, c, t, tc, ok) in enumerate(raw)]
    new = int(context * new_frac)
    cached = {r: int((context - new) * f) for r, f in cached_frac.items()}
    turn = TurnRequest("s", "g", 2, context, new, None if home < 0 else home, cached)
    s = SessionSettings(move_margin=margin, expected_step_s=200.0)
    if not any(v.healthy for v in views):
        with pytest.raises(ReplicaError):
            place_turn(turn, views, s, elapsed)
        return
    d = place_turn(turn, views, s, elapsed)
    assert views[d.replica].healthy
    assert d.prefill_tokens == context - cached.get(d.replica, 0)
    home_ok = turn.home is not None and turn.home < len(views) and views[turn.home].healthy
    if d.reason == "move":
        assert home_ok and d.replica != turn.home
        home_cfg = views[turn.home].config  # type: ignore[index]
        extra = (CONFIG.prefill_cost_s(d.prefill_tokens, cached.get(d.replica, 0))
                 - home_cfg.prefill_cost_s(turn.uncached_on(turn.home),  # type: ignore[arg-type]
                                           turn.cached_on(turn.home)))  # type: ignore[arg-type]
        assert d.move_prefill_s == pytest.approx(extra, rel=1e-9, abs=1e-12)
        assert d.saving_s >= margin * d.move_prefill_s + s.seam_s - 1e-12
        assert d.predicted_gain_s > 0
    elif d.reason == "stay":
        assert home_ok and d.replica == turn.home and not d.moved
    else:
        assert not home_ok


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.integers(1, 5000))
def test_the_decision_reads_no_length(n_out: int, prompt: int) -> None:
    """Nothing a turn will generate reaches place_turn: two requests identical but for the
    client's max_tokens get the same decision (max_tokens is never read), and the decision's
    inputs have no field for an output length."""
    views = [view(CONFIG, 0, 30), view(CONFIG, 1, 5, tool=10)]
    a = TurnRequest("s", "g", 1, prompt + 100, 100, 0, {0: prompt})
    b = dataclasses.replace(a, max_tokens=n_out)
    s = SessionSettings()
    assert place_turn(a, views, s, 5.0) == place_turn(b, views, s, 5.0)
    names = {f.name for f in dataclasses.fields(TurnRequest)} | {
        f.name for f in dataclasses.fields(ReplicaView)}
    assert not any("output" in n or "length" in n for n in names)


def test_a_session_no_longer_counted_at_home_is_not_taken_off_its_load(
        config: ReplicaConfig) -> None:
    """Home holds three sessions in a tool call, the other replica two. Counted among home's
    three, the arriving session leaves two others there: a tie, it stays. Its own wait lapsed
    (a live book's), the three are others: home is the heavier, and it moves."""
    views = [view(config, 0, 4, 4000, 3), view(config, 1, 4, 4000, 2)]
    turn = TurnRequest("s", "g", 3, 4000, 300, 0, {0: 3700})
    s = SessionSettings(expected_step_s=600)
    assert place_turn(turn, views, s, 30.0).reason == "stay"
    lapsed = place_turn(dataclasses.replace(turn, in_tool_wait=False), views, s, 30.0)
    assert lapsed.replica == 1 and lapsed.reason == "move"
