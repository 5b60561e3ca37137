"""``OnlineProfile``: the fallback until the fit is trusted, the fit after; the ``auto`` names."""

from __future__ import annotations

import numpy as np
import pytest
from online_sim import lockstep_observation, run_replica

from tailsieve.errors import ProfileError
from tailsieve.model.decode_observations import PrefillObservation
from tailsieve.model.online_profile import OnlineProfile
from tailsieve.model.profiles import check_profile, load_profile, parse_profile


def tau(b: float) -> float:
    return 0.003 + 0.00012 * b


def test_fallback_until_ready_then_the_fit() -> None:
    cpu = load_profile("cpu")
    prof = OnlineProfile(fallback=cpu)
    assert prof.current() is cpu and prof.quality is None
    rid = prof.request_started("r", 0.0, 10)
    prof.request_ended(rid, 1.0, [100], True)
    assert prof.current() is cpu  # one piece: not ready
    assert prof.quality is not None and not prof.quality.ready
    run_replica(prof.ledger, np.random.default_rng(0), tau, 2e-7, t0=10.0)
    model = prof.current()
    assert prof.ready and model is not cpu
    assert model.provenance["kind"] == "online-fit"
    assert model.max_num_seqs == cpu.max_num_seqs  # caps come from the fallback
    held = 32 * 400  # tokens of context 32 running requests hold mid-step
    assert model.step_s(32, held) == pytest.approx(tau(32) + 2e-7 * held, rel=0.1)


def test_without_a_fallback_the_best_fit_so_far() -> None:
    prof = OnlineProfile()
    with pytest.raises(ProfileError, match="nothing timed yet"):
        prof.current()
    prof.add([lockstep_observation(100, 0.5, 4)])
    model = prof.current()  # not ready, but the only model there is
    assert not prof.ready and model.provenance["kind"] == "online-fit"


def test_the_fallback_prefill_until_one_is_measured() -> None:
    derived = load_profile("qwen3-4b-h100")
    prof = OnlineProfile(fallback=derived)
    run_replica(prof.ledger, np.random.default_rng(1), tau, 0.0)
    assert prof.current().prefill == derived.prefill
    prof.add_prefill(PrefillObservation(p, 0.01 + 2e-5 * p) for p in (50, 100, 400, 800, 900,
                                                                      1000))
    got = prof.current().prefill
    assert got is not None and got.s_per_token == pytest.approx(2e-5, rel=1e-3)


def test_streamed_first_tokens_feed_the_prefill_fit() -> None:
    prof = OnlineProfile()
    for i, p in enumerate((100, 200, 400, 800, 1000, 1200)):
        rid = prof.request_started("r", float(i), p)
        prof.request_ended(rid, i + 0.9, [30], True, p, first_token_s=i + 0.01 + 1e-4 * p,
                           sent_s=float(i), prefill_tokens=p)
    got = prof.current().prefill
    assert got is not None and got.s_per_token == pytest.approx(1e-4, rel=1e-3)


def test_the_window_keeps_the_latest_observations() -> None:
    prof = OnlineProfile(max_observations=5)
    prof.add(lockstep_observation(10 + i, 1.0, 2) for i in range(8))
    assert prof.num_observations == 5 and prof.num_seen == 8
    assert [o.tokens for o in prof.observations] == [13, 14, 15, 16, 17]
    with pytest.raises(ProfileError, match="expected PieceObservation"):
        prof.add([object()])  # type: ignore[list-item]
    with pytest.raises(ProfileError, match="max_observations"):
        OnlineProfile(max_observations=1)


def test_auto_names() -> None:
    assert parse_profile("auto") == (True, None)
    assert parse_profile("auto:cpu") == (True, "cpu")
    assert parse_profile("qwen3-4b-h100") == (False, "qwen3-4b-h100")
    with pytest.raises(ProfileError, match="after 'auto:'"):
        parse_profile("auto:")
    with pytest.raises(ProfileError, match="fitted online"):
        load_profile("auto")  # the simulator needs a named profile
    check_profile("auto")
    check_profile("auto:qwen3-4b-h100")
    with pytest.raises(ProfileError, match="unknown profile"):
        check_profile("auto:nonesuch")


def test_a_refit_that_is_not_ready_keeps_the_last_ready_one() -> None:
    prof = OnlineProfile(max_observations=200)
    run_replica(prof.ledger, np.random.default_rng(0), tau, 0.0)
    good = prof.current()
    assert prof.ready
    rng = np.random.default_rng(1)  # pieces whose times have nothing to do with their work
    prof.add(lockstep_observation(int(g), float(t), float(b)) for g, t, b in zip(
        rng.integers(10, 500, 200), rng.uniform(0.1, 30.0, 200), rng.integers(1, 64, 200),
        strict=True))
    assert prof.current() is good
    assert prof.quality is not None and not prof.quality.ready
