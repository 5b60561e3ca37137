"""Agentic presets: seeded and deterministic, every trajectory inside its cap, the calibrated
targets kept (docs/workloads.md, "Multi-turn workloads"), and group_correlation doing what it
says."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tailsieve.errors import ConfigError
from tailsieve.workload.agentic_presets import AGENTIC_PRESETS, LogNormal, agentic_preset
from tailsieve.workload.turn_stats import group_share, turn_trace_stats
from tailsieve.workload.turns import TurnTrace


@pytest.fixture(scope="module")
def generated() -> dict[str, TurnTrace]:
    return {name: p.generate(64, 8, 2, 0) for name, p in AGENTIC_PRESETS.items()}


def test_names_match_the_agreed_interface() -> None:
    assert set(AGENTIC_PRESETS) == {"search-agent", "swe-agent", "swe-agent-long",
                                    "math-code-agent"}
    with pytest.raises(ConfigError, match="unknown agentic preset 'chat'"):
        agentic_preset("chat")


@pytest.mark.parametrize("name", sorted(AGENTIC_PRESETS))
def test_shape_caps_and_groups(name: str, generated: dict[str, TurnTrace]) -> None:
    p, tt = AGENTIC_PRESETS[name], generated[name]
    assert len(tt) == 64 * 8 * 2 and tt.steps() == [0, 1]
    for step in (0, 1):
        groups = tt.groups(step)
        assert len(groups) == 64
        for g in groups:
            assert [t.sample for t in g] == list(range(8))
            assert len({t.prompt_tokens for t in g}) == 1  # the shared prefix
    for t in tt.trajectories:
        assert 1 <= t.num_turns <= p.num_turns.high
        assert t.final_context_tokens <= p.max_context_tokens
        assert all(1 <= u.output_tokens <= p.output_tokens.high for u in t.turns)
        assert t.finish_reason in ("stop", "length")
        if t.finish_reason == "stop":
            assert t.num_turns >= p.num_turns.low
        else:  # cut by the cap: it ended at it, or a tool output could not have fit
            assert t.final_context_tokens + p.tool_output_tokens.high + 1 > p.max_context_tokens


@pytest.mark.parametrize("name", sorted(AGENTIC_PRESETS))
def test_seeded_and_deterministic(name: str) -> None:
    p = AGENTIC_PRESETS[name]
    a = p.generate(4, 3, 2, np.random.default_rng(7))
    assert a == p.generate(4, 3, 2, 7)
    assert a != p.generate(4, 3, 2, 8)


# (turns P50 range, final-context P50 range, final-context P90 range, tool s P50 range,
#  max truncated fraction): the calibration targets of docs/workloads.md
TARGETS = {
    "search-agent": ((2, 4), (1000, 2500), (1500, 4096), (0.5, 2.0), 0.02),
    "swe-agent": ((15, 30), (20_000, 45_000), (50_000, 65_536), (0.5, 2.0), 0.15),
    "swe-agent-long": ((25, 40), (60_000, 85_000), (90_000, 120_000), (0.5, 2.0), 0.06),
    "math-code-agent": ((2, 4), (4_000, 9_000), (12_000, 18_432), (0.1, 0.6), 0.10),
}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_calibration_targets(name: str, generated: dict[str, TurnTrace]) -> None:
    turns, ctx50, ctx90, tool50, trunc = TARGETS[name]
    s = turn_trace_stats(generated[name])
    assert turns[0] <= s["turns_p50"] <= turns[1]
    assert ctx50[0] <= s["context_p50"] <= ctx50[1]
    assert ctx90[0] <= s["context_p90"] <= ctx90[1]
    assert tool50[0] <= s["tool_s_p50"] <= tool50[1]
    assert s["truncated_fraction"] <= trunc
    assert s["turn_output_p99"] >= 3 * s["turn_output_p50"]  # long-tailed turn outputs


def test_swe_long_contexts_are_50_to_100k() -> None:
    tt = agentic_preset("swe-agent-long").generate(64, 8, 2, 1)
    ctx = np.array([t.final_context_tokens for t in tt.trajectories])
    assert np.percentile(ctx, 10) >= 40_000
    assert np.percentile(ctx, 90) <= 115_000


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.95])
def test_group_correlation_sets_the_within_group_share(rho: float) -> None:
    p = replace(agentic_preset("swe-agent"), num_turns=LogNormal(20, 0.6, 1, 400),
                max_context_tokens=10**9)
    tt = p.generate(300, 8, 1, 3, group_correlation=rho)
    turns = np.log([t.num_turns for t in tt.trajectories])
    groups = [t.prompt_id for t in tt.trajectories]
    share = group_share(turns, groups)
    # between-group share of a one-way ANOVA: rho + (1 - rho) / n in expectation (n = 8)
    assert share == pytest.approx(rho + (1 - rho) / 8, abs=0.07)


def test_correlation_raises_the_spread_of_group_maxima() -> None:
    p = agentic_preset("search-agent")
    flat = turn_trace_stats(p.generate(200, 8, 1, 5, group_correlation=0.0))
    tied = turn_trace_stats(p.generate(200, 8, 1, 5, group_correlation=0.9))
    assert tied["group_share_log_turns"] > flat["group_share_log_turns"] + 0.3
    assert tied["group_share_log_turn_output"] > flat["group_share_log_turn_output"] + 0.1


def test_context_cap_override_truncates() -> None:
    p = agentic_preset("math-code-agent")
    tt = p.generate(32, 8, 1, 0, max_context_tokens=4096)
    assert max(t.final_context_tokens for t in tt.trajectories) <= 4096
    cut = [t for t in tt.trajectories if t.finish_reason == "length"]
    assert cut and all(t.turns[-1].output_tokens >= 1 for t in cut)
    assert any(t.final_context_tokens == 4096 for t in cut)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"group_correlation": 1.5}, "group_correlation"),
        ({"trajectory_sigma_log": -0.1}, "trajectory_sigma_log"),
        ({"max_context_tokens": 1000}, "must exceed the largest prompt"),
        ({"num_turns": LogNormal(3, 0.1, 0, 5)}, "low >= 1"),
    ],
)
def test_bad_presets_are_config_errors(change: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        replace(agentic_preset("search-agent"), **change)  # type: ignore[arg-type]


def test_bad_sizes_and_lognormals() -> None:
    p = agentic_preset("search-agent")
    for bad in ({"num_groups": 0}, {"group_size": 2.0}, {"num_steps": True}):
        args = {"num_groups": 2, "group_size": 2, "num_steps": 1, **bad}
        with pytest.raises(ConfigError, match=next(iter(bad))):
            p.generate(**args)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="group_correlation"):
        p.generate(2, 2, 1, 0, group_correlation=-0.1)
    with pytest.raises(ConfigError, match="LogNormal"):
        LogNormal(10, 0.5, 20, 30)
    with pytest.raises(ConfigError, match="finite"):
        LogNormal(10, math.nan, 1, 30)


def test_lognormal_median_and_clip() -> None:
    d = LogNormal(100, 0.5, 30, 200)
    z = np.random.default_rng(0).standard_normal(20_000)
    v = d.draw(z)
    assert v.min() >= 30 and v.max() <= 200
    assert np.median(v) == pytest.approx(100, rel=0.03)
