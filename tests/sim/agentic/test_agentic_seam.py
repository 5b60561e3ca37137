"""The default boundary seam on a small simulated search-agent fleet: TailSieve stops chasing
momentary load differences with moves, and its steps are not longer than SGLang's
``cache_aware`` (the best other router on 4B search at R = 8)."""

from __future__ import annotations

from tailsieve.session.settings import SessionSettings
from tailsieve.sim.agentic.compare import AgenticSetup, replica_configs, setup_steps
from tailsieve.sim.agentic.policies import policy_spec
from tailsieve.sim.agentic.run import RunOptions, simulate_policy

SEEDS = (0, 1, 2, 3)


def _steps(policy: str, settings: SessionSettings) -> list[tuple[float, int]]:
    """(step time, boundary moves) of the measured step (after 2 warm-up steps, as the grid)
    of 16 groups x 8 search sessions on 4 replicas of Qwen3-4B, per seed."""
    out = []
    configs = replica_configs("qwen3-4b-h100", 4)
    for seed in SEEDS:
        steps = setup_steps(AgenticSetup("search-agent", 4, "qwen3-4b-h100", 16, 8, 2, 1,
                                         (seed,)), seed)
        got = simulate_policy(steps, configs, policy_spec(policy), seed,
                              RunOptions(settings=settings), 2)[2]
        assert got is not None
        out.append((got.step_s, got.boundary_moves))
    return out


def test_default_seam_on_search_is_not_slower_than_cache_aware() -> None:
    default = _steps("tailsieve", SessionSettings())
    bare = _steps("tailsieve", SessionSettings(seam_s=0.0))
    cache_aware = _steps("cache-aware", SessionSettings())
    assert sum(m for _, m in default) * 10 < sum(m for _, m in bare)
    assert sum(t for t, _ in default) <= sum(t for t, _ in cache_aware)
