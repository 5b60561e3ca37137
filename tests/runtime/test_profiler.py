"""``tailsieve profile`` measures tau(b) of a live replica (here: the emulator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tailsieve.cli import profile_cmd
from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.model.profiles import load_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorFleet, run_emulator
from tailsieve.runtime.profile_fit import mean_profile
from tailsieve.runtime.profiler import ProfileSettings, profile_endpoints

CPU = load_profile("cpu")


ATTEMPTS = 5  # real-time measurements: a loaded machine makes one run late, not all


def profile_app() -> typer.Typer:
    """A Typer app with only the ``profile`` command (as the CLI registers it)."""
    app = typer.Typer()
    app.callback()(lambda: None)
    app.command("profile")(profile_cmd.profile)
    return app


def close_to_cpu(model: ThroughputModel) -> bool:
    return all(p.step_s == pytest.approx(CPU.tau(p.batch_size), rel=0.15) for p in model.points)


async def test_profile_recovers_cpu_curve() -> None:
    for _ in range(ATTEMPTS):
        async with run_emulator(EmulatorConfig(throughput=CPU, time_scale=1.0)) as url:
            settings = ProfileSettings(url, batch_sizes=(1, 4, 16, 32), tokens=150)
            (result,) = await profile_endpoints([settings], ["emu"])
        if close_to_cpu(result.model):
            break
    assert result.model.name == "emu"
    assert url in result.model.source and "tailsieve-emulated" in result.model.source
    for m in result.measurements:
        assert m.step_s == pytest.approx(CPU.tau(m.batch_size), rel=0.15)
        assert m.first_done_step_s > 0 and m.last_done_step_s > 0 and m.wall_s > 0


async def test_profile_scaled_emulator_gives_scaled_curve() -> None:
    cfg = EmulatorConfig(throughput=CPU, time_scale=0.5, slowdown=2.0)  # net 1x, other path
    for _ in range(ATTEMPTS):
        async with run_emulator(cfg) as url:
            settings = ProfileSettings(url, batch_sizes=(1, 8), tokens=100)
            (result,) = await profile_endpoints([settings])
        if close_to_cpu(result.model):
            break
    for m in result.measurements:
        assert m.step_s == pytest.approx(CPU.tau(m.batch_size), rel=0.15)


@pytest.mark.parametrize("kwargs", [
    {"endpoint": "localhost:8000"},
    {"batch_sizes": ()},
    {"batch_sizes": (4, 2)},
    {"batch_sizes": (0, 1)},
    {"tokens": 5},
    {"context_lengths": (0, 100)},
    {"context_lengths": (500, 100)},
    {"context_batch": 0},
])
def test_bad_settings(kwargs: dict[str, Any]) -> None:
    base: dict[str, Any] = {"endpoint": "http://127.0.0.1:1"}
    with pytest.raises(ConfigError):
        ProfileSettings(**{**base, **kwargs})


async def test_unreachable_endpoint() -> None:
    with pytest.raises(ReplicaError, match="cannot reach"):
        await profile_endpoints([ProfileSettings("http://127.0.0.1:9", batch_sizes=(1,))])


async def test_server_rejecting_request_is_reported() -> None:
    async with run_emulator(EmulatorConfig(throughput=CPU, time_scale=0.01,
                                           max_model_len=100)) as url:
        with pytest.raises(ReplicaError, match="HTTP 400"):
            await profile_endpoints([ProfileSettings(url, batch_sizes=(1,), tokens=200)])


@pytest.mark.slow
def test_profile_cli_writes_loadable_file(tmp_path: Path) -> None:
    app = profile_app()
    out = tmp_path / "measured.json"
    with EmulatorFleet.start(1, profile="cpu", time_scale=1.0) as fleet:
        for _ in range(ATTEMPTS):
            res = CliRunner().invoke(app, ["profile", "--endpoint", fleet.urls[0],
                                           "--batch-sizes", "1,8,32", "--tokens", "100",
                                           "--out", str(out), "--name", "emu-cpu"])
            assert res.exit_code == 0, res.output
            model = load_profile(out)
            if close_to_cpu(model):
                break
    assert model.name == "emu-cpu" and [p.batch_size for p in model.points] == [1, 8, 32]
    for p in model.points:
        assert p.step_s == pytest.approx(CPU.tau(p.batch_size), rel=0.15)
    assert len(json.loads(out.read_text())["measurements"]) == 3


async def test_lockstep_profiles_two_endpoints_each_against_its_own_curve() -> None:
    slow = CPU.scaled(2.0)  # the second replica is twice as slow per step
    for _ in range(ATTEMPTS):
        async with (
            run_emulator(EmulatorConfig(throughput=CPU, time_scale=1.0)) as u1,
            run_emulator(EmulatorConfig(throughput=slow, time_scale=1.0)) as u2,
        ):
            settings = [ProfileSettings(u, batch_sizes=(1, 8), tokens=100) for u in (u1, u2)]
            fast_r, slow_r = await profile_endpoints(settings, ["a", "b"])
        ok = all(
            m.step_s == pytest.approx(curve.tau(m.batch_size), rel=0.15)
            for r, curve in ((fast_r, CPU), (slow_r, slow))
            for m in r.measurements
        )
        if ok:
            break
    assert (fast_r.model.name, slow_r.model.name) == ("a", "b")
    assert u1 in fast_r.model.source and "lockstep with 1 other" in fast_r.model.source
    for r, curve in ((fast_r, CPU), (slow_r, slow)):
        for m in r.measurements:
            assert m.step_s == pytest.approx(curve.tau(m.batch_size), rel=0.15)
    mean = mean_profile([fast_r, slow_r], "fleet")
    for p, mf, ms in zip(mean.points, fast_r.measurements, slow_r.measurements, strict=True):
        assert p.step_s == pytest.approx((mf.step_s + ms.step_s) / 2)


async def test_lockstep_rejects_mismatched_or_duplicate_endpoints() -> None:
    a = ProfileSettings("http://127.0.0.1:1", batch_sizes=(1, 2))
    with pytest.raises(ConfigError, match="same batch sizes"):
        await profile_endpoints([a, ProfileSettings("http://127.0.0.1:2", batch_sizes=(1,))])
    with pytest.raises(ConfigError, match="twice"):
        await profile_endpoints([a, ProfileSettings("http://127.0.0.1:1/", batch_sizes=(1, 2))])
    with pytest.raises(ConfigError, match="no endpoint"):
        await profile_endpoints([])


@pytest.mark.slow
def test_profile_cli_with_two_endpoints_writes_their_mean(tmp_path: Path) -> None:
    app = profile_app()
    out = tmp_path / "fleet.json"
    with EmulatorFleet.start(2, profile="cpu", time_scale=1.0) as fleet:
        res = CliRunner().invoke(app, ["profile", "--endpoint", fleet.urls[0], "--endpoint",
                                       fleet.urls[1], "--batch-sizes", "1,8", "--tokens", "100",
                                       "--out", str(out), "--name", "fleet"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    model = load_profile(out)
    assert model.name == "fleet" and [p.batch_size for p in model.points] == [1, 8]
    per = data["per_endpoint"]
    assert [e["endpoint"] for e in per] == fleet.urls
    for j, p in enumerate(model.points):
        each = [e["measurements"][j]["step_s"] for e in per]
        assert p.step_s == pytest.approx(max(sum(each) / 2, model.points[0].step_s))


async def test_profile_fits_context_term_of_the_emulator() -> None:
    k = 1e-6  # seconds per step per token of context held by the batch
    curve = CPU.with_context(k)
    for _ in range(ATTEMPTS):
        async with run_emulator(EmulatorConfig(throughput=curve, time_scale=1.0)) as url:
            settings = ProfileSettings(url, batch_sizes=(1, 8), tokens=100,
                                       context_lengths=(300, 900), context_batch=8)
            (result,) = await profile_endpoints([settings], ["emu-k"])
        ok = result.model.context_s_per_token == pytest.approx(k, rel=0.25) and close_to_cpu(
            result.model)
        if ok:
            break
    assert [m.prompt_tokens for m in result.context_measurements] == [1, 300, 900]
    assert result.model.context_s_per_token == pytest.approx(k, rel=0.25)
    assert close_to_cpu(result.model)  # points moved to zero context: the emulator's tau(b)
    data = result.to_dict()
    assert data["context_s_per_token"] > 0 and len(data["context_measurements"]) == 3
    assert data["provenance"]["kind"] == "measured" and "a0_s" in data["provenance"]["fit"]
    assert "Context term k" in result.model.source
    loaded = ThroughputModel.from_dict(data)
    assert loaded.context_s_per_token == result.model.context_s_per_token


@pytest.mark.parametrize("noisy_pairs", [1, 2, 9])
async def test_a_pair_of_rounds_measuring_no_time_is_measured_again(
    noisy_pairs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause during a short round can make it end after the full one: the step comes out
    <= 0. The profiler measures more pairs (at most ``EXTRA_PAIRS``) and fails with one clear
    line when none helps, never with a non-positive step."""
    from tailsieve.errors import ProfileError
    from tailsieve.runtime import profiler

    rounds: list[int] = []

    async def fake_round(runner: Any, st: Any, b: int, tokens: int) -> tuple[list[float], int]:
        rounds.append(tokens)
        pair = (len(rounds) - 1) // 2
        short = tokens < 200
        stalled = pair < noisy_pairs and short  # this short round paused for 1 s
        return [(1.0 if stalled else 0.0) + 0.002 * tokens] * b, 5

    monkeypatch.setattr(profiler, "_round", fake_round)
    st = [ProfileSettings(endpoint="http://x", tokens=200, repeats=1)]
    if noisy_pairs > profiler.EXTRA_PAIRS:
        with pytest.raises(ProfileError, match="too noisy"):
            await profiler.measure_batch_lockstep([None], st, 2)  # type: ignore[list-item]
        assert len(rounds) == 2 * (1 + profiler.EXTRA_PAIRS)
        return
    (m,) = await profiler.measure_batch_lockstep([None], st, 2)  # type: ignore[list-item]
    assert m.step_s > 0
    assert len(rounds) >= 2 * (noisy_pairs + 1)  # measured until the median came out positive
