"""The speculating replica: pays at low batch, not at high batch; price and gate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.model.acceptance import LITERATURE, AcceptanceCurve
from tailsieve.model.profiles import load_profile
from tailsieve.model.spec_engine import SpecEngine
from tailsieve.model.throughput import ThroughputModel

BASE = load_profile("qwen3-4b-h100")
SERVER = AcceptanceCurve("srv", "suffix-siblings", ((1, 1.5), (8, 3.0)), placement="server")


@pytest.mark.parametrize("name", sorted(LITERATURE))
def test_speculation_pays_at_low_batch_and_not_at_high_batch(name: str) -> None:
    eng = SpecEngine(LITERATURE[name])
    low, high = eng.speedup(BASE, [1, 1024])
    assert low > 1.0 > high


def test_tlt_preset_reproduces_its_two_points_on_the_4b_profile() -> None:
    at1, at32 = SpecEngine(LITERATURE["tlt-eagle-tree"]).speedup(BASE, [1, 32])
    assert at1 == pytest.approx(3.62, rel=0.05)
    assert at32 == pytest.approx(1.70, rel=0.12)


@given(price=st.floats(1.0, 4.0), b=st.integers(1, 1024))
@settings(max_examples=50, deadline=None)
def test_a_higher_price_never_speeds_speculation_up(price: float, b: int) -> None:
    curve = LITERATURE["seer"]
    cheap = SpecEngine(curve).speedup(BASE, b)
    dear = SpecEngine(curve, price=price).speedup(BASE, b)
    assert dear <= cheap + 1e-12


def _at_ref(model: ThroughputModel, b: np.ndarray, ctx: float = 2048.0) -> np.ndarray:
    """Seconds per emitted token at batch ``b`` with ``ctx`` tokens held per request."""
    return np.array([model.step_s(float(x), float(x) * ctx) for x in b])


def test_gate_takes_the_better_of_speculating_and_not() -> None:
    curve = LITERATURE["tlt-eagle-tree"]
    b = np.arange(1, 1025)
    always = _at_ref(SpecEngine(curve, gate="always").throughput(BASE), b)
    gated_model = SpecEngine(curve, gate="pays").throughput(BASE)
    gated = _at_ref(gated_model, b)
    plain = _at_ref(BASE, b)
    assert np.all(gated <= plain * (1 + 1e-9))
    assert np.all(gated <= always * (1 + 1e-9))
    # with no context held, the wide verify forward at 1024 running costs more than it gains
    bare = SpecEngine(curve, gate="pays", ref_context_tokens=0).throughput(BASE)
    gated, plain = _at_ref(bare, b, 0.0), _at_ref(BASE, b, 0.0)
    assert np.all(gated <= plain * (1 + 1e-9))
    assert gated[0] < plain[0] / 2  # speculates in the tail
    assert gated[-1] == pytest.approx(plain[-1])  # not at 1024 running
    assert np.all(np.diff(gated_model.tau_array(b)) >= -1e-15)  # non-decreasing tau(b)


def test_gate_decides_with_the_context_held() -> None:
    """At twice the price the 30B-A3B profile's tree speculation loses at batch 1 with no
    context, but the KV reads it saves at long contexts make it pay in the middle range."""
    moe = load_profile("qwen3-30b-a3b-h100-tp2")
    eng = SpecEngine(LITERATURE["tlt-eagle-tree"], price=2.0, gate="pays",
                     ref_context_tokens=4096)
    b = np.array([1, 64, 256])
    gated = _at_ref(eng.throughput(moe), b, 4096)
    plain = _at_ref(moe, b, 4096)
    assert eng.speedup(moe, 1) < 1.0
    assert gated[0] == pytest.approx(plain[0], rel=1e-9)
    assert np.all(gated[1:] < plain[1:])


def test_context_term_is_read_once_per_verify_step() -> None:
    curve = LITERATURE["seer"]
    m = SpecEngine(curve).throughput(BASE, k=8)
    assert m.context_s_per_token == pytest.approx(BASE.context_s_per_token / curve.tau(8))
    never = AcceptanceCurve("never", "x", ((1, 1.0),), ((1, 8.0),))
    gated = SpecEngine(never, gate="pays").throughput(BASE)
    assert gated.context_s_per_token == BASE.context_s_per_token
    assert np.allclose(gated.tau_array(np.arange(1, 100)), BASE.tau_array(np.arange(1, 100)))


def test_finished_siblings_draft_more_as_the_replica_drains() -> None:
    """A server tree: siblings help only once they have finished on this server."""
    curve = SERVER
    eng = SpecEngine(curve)
    full = eng.throughput(BASE, k=8, dealt=64)
    spread = eng.throughput(BASE, k=1, dealt=64)
    b = np.array([1, 64])
    f, s_ = _at_ref(full, b), _at_ref(spread, b)
    # at 64 running nothing has finished: no sibling drafts yet
    assert f[1] == pytest.approx(s_[1])
    # at 1 running almost every sibling finished on this server
    assert f[0] < s_[0] * curve.tau(1) / curve.tau(7)


@pytest.mark.parametrize("name", sorted(LITERATURE))
def test_a_placement_free_source_prices_every_dealing_alike(name: str) -> None:
    """Seer's group drafter, EAGLE/MTP, the previous epoch, prompt lookup: whether the group's
    siblings share the server, and whether they finished, changes nothing."""
    eng = SpecEngine(LITERATURE[name], gate="pays")
    b = np.arange(1, 300)
    alone = eng.throughput(BASE, k=1, dealt=64).tau_array(b)
    for k, dealt in ((8, 64), (8, None), (2, 16)):
        assert np.array_equal(eng.throughput(BASE, k=k, dealt=dealt).tau_array(b), alone)


@pytest.mark.parametrize("gate", ["pays", "always"])
def test_batch_schedule_is_the_gate_as_vllm_takes_it(gate: str) -> None:
    eng = SpecEngine(LITERATURE["tlt-eagle-tree"], gate=gate,  # type: ignore[arg-type]
                     ref_context_tokens=0)
    sched = eng.batch_schedule(BASE, max_batch=512)
    # contiguous inclusive ranges from 1 to max_batch, alternating depths
    assert sched[0][0] == 1 and sched[-1][1] == 512
    for (_, end, d0), (start, _, d1) in itertools.pairwise(sched):
        assert start == end + 1 and d0 != d1
    depth = {b: d for lo, hi, d in sched for b in range(lo, hi + 1)}
    gated = _at_ref(eng.throughput(BASE, max_batch=512), np.arange(1, 513), 0.0)
    plain = _at_ref(BASE, np.arange(1, 513), 0.0)
    for b in range(1, 513):
        if gate == "always":
            assert depth[b] == 16
        elif depth[b]:
            assert depth[b] == 16 and gated[b - 1] < plain[b - 1] * (1 + 1e-9)
        else:
            assert gated[b - 1] == pytest.approx(plain[b - 1], rel=1e-6)
    if gate == "pays":  # at zero context the tree stops paying at 88 running
        assert depth[1] == 16 and depth[512] == 0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError):
        SpecEngine(LITERATURE["seer"], price=0.0)
    with pytest.raises(ConfigError):
        SpecEngine(LITERATURE["seer"], gate="sometimes")  # type: ignore[arg-type]
