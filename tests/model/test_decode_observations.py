"""The ledger turns request records into a replica's batch and context over each window."""

from __future__ import annotations

import pytest

from tailsieve.errors import ProfileError
from tailsieve.model.decode_observations import DecodeLedger
from tailsieve.model.throughput import ThroughputModel


def test_overlapping_requests_share_their_stretches() -> None:
    led = DecodeLedger()
    a = led.start("r", 0.0, prompt_tokens=100)
    b = led.start("r", 1.0, prompt_tokens=50)
    led.end(a, 4.0, [40], True)
    led.end(b, 2.0, [10], True)
    obs = {o.tokens: o for o in led.harvest()}
    long, short = obs[40], obs[10]
    assert long.durations_s == pytest.approx((1.0, 1.0, 2.0))
    assert long.batch == (1.0, 2.0, 1.0)
    assert short.batch == (2.0,) and short.duration_s == 1.0
    # a alone gains its tokens evenly in time: 5 at 0.5 s; in [1, 2] it holds 100 + 15 and
    # b (started at 1.0) holds 50 + 5 at 1.5 s
    assert long.context_tokens[0] == pytest.approx(105.0)
    assert long.context_tokens[1] == pytest.approx(115.0 + 55.0)
    assert all(o.replica == "r" for o in obs.values())


def test_replicas_are_kept_apart() -> None:
    led = DecodeLedger()
    a = led.start("r0", 0.0, 10)
    b = led.start("r1", 0.0, 10)
    led.end(a, 1.0, [20], True)
    led.end(b, 1.0, [20], True)
    assert [o.batch for o in led.harvest()] == [(1.0,), (1.0,)]


def test_a_cancelled_or_running_request_still_counts_in_the_batch() -> None:
    led = DecodeLedger()
    a = led.start("r", 0.0, 10)
    cut = led.start("r", 0.0, 10)
    running = led.start("r", 0.5, 10)
    led.end(cut, 0.5, None, False)  # aborted: tokens unknown
    led.end(a, 1.0, [50], True)
    (obs,) = led.harvest()  # only the answered one is an observation
    assert obs.tokens == 50
    assert obs.batch == (2.0, 2.0)  # the cut one until 0.5 s, then the running one
    assert led.num_in_flight == 1
    led.end(running, 2.0, [30], True)
    (later,) = led.harvest()
    assert later.tokens == 30 and later.batch == (2.0, 1.0)


def test_sequences_of_one_request_end_in_proportion_to_their_tokens() -> None:
    led = DecodeLedger()
    rid = led.start("r", 0.0, 10, num_seqs=2)
    led.end(rid, 2.0, [10, 40], True)
    (obs,) = led.harvest()
    assert obs.tokens == 40
    assert obs.batch == (2.0, 1.0)
    assert obs.durations_s == pytest.approx((0.5, 1.5))


def test_the_running_cap_limits_the_batch() -> None:
    led = DecodeLedger(max_num_seqs=2)
    ids = [led.start("r", 0.0, 10) for _ in range(4)]
    for i in ids:
        led.end(i, 1.0, [20], True)
    assert {o.batch for o in led.harvest()} == {(2.0,)}


def test_harvest_once_and_forget_what_no_request_can_overlap() -> None:
    led = DecodeLedger()
    a = led.start("r", 0.0, 10)
    led.end(a, 1.0, [20], True)
    assert len(led.harvest()) == 1
    assert led.harvest() == []
    b = led.start("r", 2.0, 10)
    led.end(b, 3.0, [20], True)
    (obs,) = led.harvest()
    assert obs.batch == (1.0,)  # the first one is gone and did not overlap anyway


def test_a_model_clock_places_tokens_by_step_time() -> None:
    """Two requests from 0; the short one ends at 1 s. With a model whose step is 10x slower
    at b = 2 than at b = 1, the long one made few of its tokens before 1 s."""
    def ledger() -> DecodeLedger:
        led = DecodeLedger()
        a = led.start("r", 0.0, 0)
        b = led.start("r", 0.0, 0)
        led.end(b, 1.0, [10], True)
        led.end(a, 2.0, [110], True)
        return led

    even = {o.tokens: o for o in ledger().harvest()}[110]
    clocked = {o.tokens: o for o in ledger().harvest(ThroughputModel.from_pairs(
        [(1, 0.01), (2, 0.1)]))}[110]
    assert even.context_tokens[0] > clocked.context_tokens[0]
    assert clocked.context_tokens[0] == pytest.approx(5.0 + 5.0, rel=0.05)


def test_max_per_replica_spreads_the_observations() -> None:
    led = DecodeLedger()
    for i in range(10):
        rid = led.start("r", float(i), 10)
        led.end(rid, i + 0.5, [20], True)
    assert len(led.harvest(max_per_replica=3)) == 3


def test_bad_records() -> None:
    led = DecodeLedger()
    with pytest.raises(ProfileError, match="num_seqs"):
        led.start("r", 0.0, 10, num_seqs=0)
    led.end(12345, 1.0, [3], True)  # unknown id: ignored
    rid = led.start("r", 1.0, 10)
    led.end(rid, 1.0, [5], True)  # no time passed: no observation
    assert led.harvest() == []
