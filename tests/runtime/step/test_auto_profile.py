"""The live glue of ``profile="auto"``: every request of a step is timed into the fit, the probe
runs at start without a fallback, and every step hands the latest fit to the controller and
to the move pricing."""

from __future__ import annotations

import logging

import pytest

from tailsieve.errors import ConfigError, ProfileError, ReplicaError
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest
from tailsieve.runtime.execution.auto_probe import ProbeSettings
from tailsieve.runtime.execution.profile import LiveProfile
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.stub import StubFault, StubTransport

URLS = ["http://r0", "http://r1"]


def stub(seconds_per_token: float = 0.0005) -> StubTransport:
    return StubTransport(lambda p, s: 30 + 200 * (p.endswith("0")) + 7 * s,
                         seconds_per_token=seconds_per_token, batch_slowdown=0.05)


def runner(inner: StubTransport, stream: bool = False) -> HttpPieceRunner:
    return HttpPieceRunner(URLS, model="stub", transport=inner, stream=stream)


def piece(prompt: str, tokens: int, **kw: object) -> PieceRequest:
    return PieceRequest((), SamplingParams(max_tokens=tokens), tokens, f"{prompt}-x",
                        prompt_text=prompt, forced=True, **kw)  # type: ignore[arg-type]


def test_record_piece_reads_counts_cache_hits_and_the_first_token() -> None:
    live = LiveProfile("auto")
    prof = live.online
    assert prof is not None and live.needs_probe
    req = piece("p" * 40, 8, num_samples=2)
    pid = live.time_piece("http://r0", 1.0, req)
    outs = [PieceOutput((1, 2, 3), "stop", num_prompt_tokens=100, num_cached_tokens=64,
                        chunk_times_s=(0.0, 0.25), chunk_tokens=(0, 3)),
            PieceOutput((), "length", num_tokens=5)]
    live.record_piece(pid, 1.0, 2.0, outs)
    (obs,) = prof.ledger.harvest()
    assert (obs.tokens, obs.prompt_tokens, obs.replica) == (5, 100, "http://r0")  # longest
    assert [(o.prompt_tokens, o.ttft_s) for o in prof._prefill] == [(36, 0.25)]  # uncached
    failed = live.time_piece("http://r1", 3.0, piece("p", 8))
    live.record_piece(failed, 3.0, 3.5, None)  # failed: it ran, nothing to fit
    assert prof.ledger.num_in_flight == 0 and prof.ledger.harvest() == []
    assert live.num_new == 2  # both ended: they count towards a refit


@pytest.mark.parametrize(("stream", "moves"), [(False, True), (True, True), (True, False)])
async def test_every_request_of_a_step_is_timed_into_the_fit(stream: bool, moves: bool) -> None:
    """Chained pieces and whole responses alike, as the session gateway times its pieces."""
    inner = stub()
    async with TailSieveRollout(URLS, config(profile="auto:cpu", stream=stream, moves=moves),
                                transport=inner) as ro:
        online = ro.live.online
        assert online is not None and ro.executor.timings is ro.live
        await run(ro, 1)
        assert online.num_seen >= len(inner.log.completed) > 0
        assert online.ledger.num_in_flight == 0
        assert set(online.speeds()) <= set(URLS)


async def test_the_probe_times_lockstep_rounds_without_recording_them() -> None:
    inner = stub(seconds_per_token=0.003)
    auto = LiveProfile("auto")
    assert auto.needs_probe and auto.online is not None
    measured = await auto.probe(runner(inner), [0, 1], load=8,
                                settings=ProbeSettings(tokens=32, max_batch=8, prefill_repeats=1))
    assert not auto.needs_probe
    hellos = [s for s in inner.log.started if s[1] == "hello"]
    assert len(hellos) >= 2 * 2 * (1 + 3 + 8)  # replicas x (short, full) x batch sizes
    assert [p.batch_size for p in measured.points] == [1, 3, 8]
    # the stub's step: 3 ms x (1 + 0.05 per other request running when one starts)
    assert measured.tau(1) == pytest.approx(0.003, rel=0.3)
    assert measured.tau(8) > measured.tau(1)
    assert measured.provenance["kind"] == "probe"
    assert auto.online.ledger.num_replicas == 0  # its requests are not observations
    assert auto.refit() is measured and auto.model is measured  # until the pieces fit
    assert not auto.fitted
    assert ProbeSettings().batch_sizes(64) == (1, 8, 64)
    assert ProbeSettings(max_batch=16).batch_sizes(100) == (1, 4, 16)


async def test_the_probe_leaves_out_a_failing_replica_and_fails_when_all_do() -> None:
    inner = stub()
    inner.faults["http://r1"] = StubFault(num_http_400=10_000)
    settings = ProbeSettings(tokens=16, max_batch=4, prefill_repeats=0)
    measured = await LiveProfile("auto").probe(runner(inner), [0, 1], 4, settings)
    assert measured.provenance["replicas"] == ["http://r0"]
    inner.faults["http://r0"] = StubFault(num_http_400=10_000)
    again = LiveProfile("auto")
    with pytest.raises(ReplicaError, match="auto:NAME"):
        await again.probe(runner(inner), [0, 1], 4, settings)
    assert again.needs_probe


def config(**kw: object) -> RolloutConfig:
    kw.setdefault("sampling", SamplingParams(max_tokens=2000))
    return RolloutConfig(num_groups=4, group_size=4, model="m", **kw)  # type: ignore[arg-type]


async def run(ro: TailSieveRollout, steps: int) -> None:
    prompts = [PromptInput(f"p{i}", text=f"p{i}") for i in range(100)]
    for _ in range(steps):
        need = ro.num_fresh_needed()
        await ro.step(prompts[:need])
        prompts = prompts[need:]


async def test_auto_is_the_default_and_refits_every_step() -> None:
    inner = stub()
    assert RolloutConfig(num_groups=1).profile == "auto"
    async with TailSieveRollout(URLS, config(), transport=inner) as ro:
        assert ro.live.online is not None
        assert any(s[1] == "hello" for s in inner.log.started)  # probed at start
        probed = ro.profile
        assert probed.provenance["kind"] == "probe"
        for _ in range(8):  # a fit is trusted once its pieces' timings agree with it: two
            await run(ro, 1)  # steps on a quiet machine, more where CPU load jitters them
            if ro.profile is not probed:
                break
        assert ro.profile is not probed
        assert ro.live.num_observations > 0 and ro.live.fitted
        pred = ro.protocol.controller.predictor  # type: ignore[attr-defined]
        assert pred.tail_model is ro.profile and pred.bulk_model is ro.profile
        costs = ro.executor.balance_costs
        assert costs is not None and all(c.throughput is ro.profile for c in costs)


async def test_a_named_fallback_replaces_the_probe() -> None:
    inner = stub()
    async with TailSieveRollout(URLS, config(profile="auto:cpu"), transport=inner) as ro:
        assert ro.profile.name == "cpu"
        assert not any(s[1] == "hello" for s in inner.log.started)
        await run(ro, 1)


async def test_fixed_profiles_and_model_free_policies_fit_nothing() -> None:
    async with TailSieveRollout(URLS, config(profile="qwen3-4b-h100"), transport=stub()) as ro:
        assert ro.live.online is None and ro.profile.name == "qwen3-4b-h100"
    inner = stub()
    async with TailSieveRollout(URLS, config(policy="uniform"), transport=inner) as ro:
        assert ro.live.online is None and ro.profile.name == "cpu"
        await run(ro, 1)
        assert not any(s[1] == "hello" for s in inner.log.started)


def test_bad_profiles_fail_at_config_time() -> None:
    with pytest.raises(ProfileError, match="unknown profile"):
        config(profile="auto:nonesuch")
    with pytest.raises(ProfileError):
        config(profile="nonesuch")
    with pytest.raises(ConfigError, match="tokens >= 8"):
        ProbeSettings(tokens=2)


def test_why_moves_are_off_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="tailsieve.runtime.step.rollout"):
        TailSieveRollout(URLS, config(moves=False, profile="cpu"), transport=stub())
        TailSieveRollout(URLS, config(backend=Backend.SGLANG, profile="cpu",
                                      sampling=SamplingParams(max_tokens=99, stop=("x",))),
                         transport=stub())
    recs = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.INFO, "TailSieve: moves are off: moves=False") in recs
    assert any(lvl == logging.WARNING and "stop strings on SGLang" in msg for lvl, msg in recs)
    assert len(recs) == 2


async def test_a_checkpoint_keeps_the_model_in_use() -> None:
    async with TailSieveRollout(URLS, config(), transport=stub()) as ro:
        await run(ro, 2)
        state = ro.state_dict()
        fitted = ro.profile
    assert state["profile"]["provenance"]["kind"] == "online-fit"
    inner = stub()
    resumed = TailSieveRollout(URLS, config(), transport=inner)
    resumed.load_state_dict(state)
    async with resumed as ro2:  # no probe: the saved model stands in
        assert not any(s[1] == "hello" for s in inner.log.started)
        assert ro2.profile.points == fitted.points
        assert ro2.protocol.controller.predictor.tail_model is ro2.profile  # type: ignore[attr-defined]
        await run(ro2, 1)
