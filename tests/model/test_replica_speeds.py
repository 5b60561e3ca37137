"""Per-replica speed factors: a slow replica stands out of the shared curve, a uniform fleet
reads as homogeneous, few pieces stay near the shared curve (its prior)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from online_sim import lockstep_observation, run_replica

from tailsieve.errors import ProfileError
from tailsieve.model.decode_observations import PieceObservation
from tailsieve.model.online_profile import OnlineProfile
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_speeds import fit_speeds, normalized, piece_slowness
from tailsieve.model.throughput import ThroughputModel


def tau(b: float) -> float:
    return 0.003 + 0.00012 * b


def curve(factor: float = 1.0) -> ThroughputModel:
    return ThroughputModel.from_pairs([(b, factor * tau(b)) for b in (1, 2, 4, 8, 16, 32, 64)])


def piece(tokens: int, duration_s: float, batch: float, replica: str) -> PieceObservation:
    return replace(lockstep_observation(tokens, duration_s, batch), replica=replica)


def fleet(slow: dict[str, float], seed: int = 0) -> OnlineProfile:
    """Three replicas' pieces on one profile, ``slow[r]`` times slower where given."""
    prof = OnlineProfile(fallback=load_profile("cpu"))
    rng = np.random.default_rng(seed)
    t = 0.0
    for r in ("0", "1", "2"):
        f = slow.get(r, 1.0)
        t = run_replica(prof.ledger, rng, lambda b, f=f: f * tau(b), f * 2e-7, replica=r,
                        t0=t + 1.0)
    return prof


def test_a_replica_four_times_slower_gets_its_own_factor() -> None:
    prof = fleet({"2": 4.0})
    speeds = prof.speeds()
    assert speeds["0"] == pytest.approx(1.0, rel=0.1)
    assert speeds["1"] == pytest.approx(1.0, rel=0.1)
    assert speeds["2"] == pytest.approx(4.0, rel=0.2)
    model = prof.current()  # the shared curve is the typical (fast) replica's
    assert prof.ready and model.step_s(32, 32 * 400) == pytest.approx(
        tau(32) + 2e-7 * 32 * 400, rel=0.12)


def test_a_uniform_fleet_reads_as_homogeneous() -> None:
    prof = fleet({})
    assert prof.speeds() == {"0": 1.0, "1": 1.0, "2": 1.0}


def test_few_pieces_stay_near_the_shared_curve() -> None:
    pieces = [piece(100, 4 * 100 * tau(4), 4, "s")] * 2
    pieces += [piece(100, 100 * tau(4), 4, r) for r in "ab"] * 40
    few = fit_speeds(pieces, curve(), prior_pieces=8.0)
    assert 1.25 < few["s"] < 4.0 / 1.5  # two pieces: shrunk toward 1
    many = fit_speeds(pieces + pieces[:2] * 20, curve(), prior_pieces=8.0)
    assert many["s"] == pytest.approx(4.0, rel=0.2)
    assert fit_speeds(pieces, curve(), prior_pieces=0.0)["s"] == pytest.approx(4.0)


def test_a_curve_off_by_a_constant_gives_the_same_factors() -> None:
    """A young curve (a few pieces of one batch size) can be far off. Shrunk toward the curve
    itself, a straggler with two pieces against the others' four came out 12x faster than
    them in a live run; shrunk toward the typical piece, the factors do not depend on it."""
    pieces = [piece(400, 5 * 400 * tau(4), 4, "2")] * 2
    pieces += [piece(400, 400 * tau(4), 4, r) for r in "01"] * 4
    right = fit_speeds(pieces, curve())
    assert right["2"] > 1.25 and right["0"] == right["1"] == 1.0
    for off in (1e-3, 1e3):
        assert fit_speeds(pieces, curve(off)) == pytest.approx(right)


def test_slowness_and_normalization_round_trip() -> None:
    o = piece(50, 3.0 * 50 * tau(8), 8, "x")
    assert piece_slowness(o, curve()) == pytest.approx(3.0)
    (back,) = normalized([o], {"x": 3.0})
    assert piece_slowness(back, curve()) == pytest.approx(1.0)
    assert normalized([o], {"y": 2.0})[0] is o


def test_bad_settings_are_named() -> None:
    with pytest.raises(ProfileError, match="band"):
        fit_speeds([], curve(), band=0.5)
    with pytest.raises(ProfileError, match="prior_pieces"):
        fit_speeds([], curve(), prior_pieces=-1.0)
