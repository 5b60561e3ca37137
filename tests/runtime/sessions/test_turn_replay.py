"""A preset's step replayed on emulated replicas through an agentic rollout comes back as the
same turns: every prompt, output and tool output of the trace, under TailSieve's routing."""

from __future__ import annotations

import pytest

from tailsieve.errors import ConfigError
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.sessions import AgenticConfig, AgenticRollout, GatewayConfig
from tailsieve.runtime.sessions.replay import TurnReplay
from tailsieve.workload.agentic_presets import agentic_preset
from tailsieve.workload.turns import Trajectory, Turn


@pytest.mark.parametrize("policy", ["tailsieve", "verl-sticky"])
async def test_a_preset_step_replays_turn_for_turn(policy: str) -> None:
    trace = agentic_preset("search-agent").generate(3, 2, 1, rng=4)
    replay = TurnReplay(trace.trajectories, time_scale=0.001)
    cfg = AgenticConfig(group_size=replay.group_size, max_turns=replay.max_turns,
                        turn_sampling=replay.sampling,
                        gateway=GatewayConfig(policy=policy, piece_tokens=64,
                                              profile="qwen3-4b-h100"))
    emu = [EmulatorConfig.from_profile("qwen3-4b-h100", time_scale=0.001, seed=i,
                                       max_model_len=8192) for i in range(2)]
    async with EmulatorServer(emu[0]) as a, EmulatorServer(emu[1]) as b, \
            AgenticRollout([a.url, b.url], cfg) as ro:
        batch = await ro.run(replay.prompts(), replay.tool)
    got = {(t.prompt_id, t.sample): t for t in batch.turn_trace().trajectories}
    for want in trace.trajectories:
        t = got[(want.prompt_id, want.sample)]
        assert t.prompt_tokens == want.prompt_tokens
        assert [u.output_tokens for u in t.turns] == [u.output_tokens for u in want.turns]
        assert [u.tool_output_tokens for u in t.turns] == [u.tool_output_tokens
                                                           for u in want.turns]
    assert batch.stats.prefix_hit_tokens > 0


def test_uneven_groups_are_refused() -> None:
    one = Trajectory("a", 0, 5, (Turn(3),))
    with pytest.raises(ConfigError, match="different sizes"):
        TurnReplay([one, Trajectory("a", 1, 5, (Turn(3),)), Trajectory("b", 0, 5, (Turn(2),))])
    with pytest.raises(ConfigError, match="samples must be"):
        TurnReplay([Trajectory("a", 1, 5, (Turn(3),))])
