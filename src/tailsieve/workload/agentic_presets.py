"""Named multi-turn presets (``agentic_preset(name).generate(...)``), calibrated to published
agentic-RL statistics. Each number's source is in ``docs/workloads.md`` ("Multi-turn
workloads"); the targets the presets must keep are checked by
``tests/workload/test_agentic_presets.py``.

* ``search-agent``: Search-R1-style retrieval QA; a few turns, second-scale search calls,
  ~400-token observations, a 4K context.
* ``swe-agent``: SWE-Gym / R2E-Gym / SWE-agent / OpenHands-style repository repair; tens of
  turns, shell and editor tools, contexts reaching 50-65K tokens (a 64K window).
* ``swe-agent-long``: the setting of verl #6533: many long sessions whose contexts are
  50-100K tokens, so a re-prefill costs seconds.
* ``math-code-agent``: ReTool-style math with a code interpreter (verl-recipe ``retool``); few
  turns, long reasoning, short interpreter outputs, a 16K response budget.
"""

from __future__ import annotations

from tailsieve.errors import ConfigError
from tailsieve.workload.agentic_model import AgenticPreset, LogNormal

__all__ = ["AGENTIC_PRESETS", "AgenticPreset", "LogNormal", "agentic_preset"]

_SWE_TOOL_S = LogNormal(median=1.0, sigma_log=1.1, low=0.05, high=120.0)

AGENTIC_PRESETS: dict[str, AgenticPreset] = {
    "search-agent": AgenticPreset(
        name="search-agent",
        description="retrieval QA agent: a few searches, then an answer",
        source="Search-R1 (train_ppo.sh, arXiv 2503.09516); Search-R1 re-examined; RL2 example",
        prompt_tokens=LogNormal(260, 0.25, 120, 2048),
        num_turns=LogNormal(3, 0.35, 1, 5),
        output_tokens=LogNormal(150, 0.6, 1, 500),
        trajectory_sigma_log=0.3,
        tool_output_tokens=LogNormal(390, 0.12, 200, 500),
        tool_s=LogNormal(1.0, 0.6, 0.05, 10.0),
        max_context_tokens=4096,
    ),
    "swe-agent": AgenticPreset(
        name="swe-agent",
        description="repository-repair agent: shell and editor tools over tens of turns",
        source="SWE-rebench-OpenHands dataset card (turn stats of 6 SWE trajectory sets); "
        "DeepSWE; SkyRL-Agent; NeMo Gym SWE RL; Daytona sandbox latencies",
        prompt_tokens=LogNormal(4000, 0.3, 1500, 16000),
        num_turns=LogNormal(20, 0.6, 3, 100),
        output_tokens=LogNormal(300, 0.9, 1, 8192),
        trajectory_sigma_log=0.3,
        tool_output_tokens=LogNormal(600, 1.0, 10, 8000),
        tool_s=_SWE_TOOL_S,
        max_context_tokens=65536,
    ),
    "swe-agent-long": AgenticPreset(
        name="swe-agent-long",
        description="long SWE sessions with 50-100K-token contexts (verl #6533's setting)",
        source="verl PR #6533 (50-100K-token contexts); SWE-rebench-OpenHands (64 turns avg "
        "for Qwen3-Coder on OpenHands)",
        prompt_tokens=LogNormal(8000, 0.3, 3000, 24000),
        num_turns=LogNormal(30, 0.3, 12, 100),
        output_tokens=LogNormal(400, 0.9, 1, 8192),
        trajectory_sigma_log=0.3,
        tool_output_tokens=LogNormal(1100, 0.8, 10, 12000),
        tool_s=_SWE_TOOL_S,
        max_context_tokens=131072,
    ),
    "math-code-agent": AgenticPreset(
        name="math-code-agent",
        description="math reasoning with a code interpreter: few turns, long reasoning",
        source="verl-recipe retool (ReTool, arXiv 2504.11536): max 16 turns, 2K prompt, 16K "
        "response, 30 s sandbox timeout",
        prompt_tokens=LogNormal(200, 0.4, 50, 2048),
        num_turns=LogNormal(3, 0.5, 1, 16),
        output_tokens=LogNormal(1500, 0.8, 1, 16384),
        trajectory_sigma_log=0.35,
        tool_output_tokens=LogNormal(60, 1.0, 1, 1024),
        tool_s=LogNormal(0.3, 0.8, 0.01, 30.0),
        max_context_tokens=18432,
    ),
}


def agentic_preset(name: str) -> AgenticPreset:
    """The preset called ``name`` (one of ``AGENTIC_PRESETS``)."""
    if name not in AGENTIC_PRESETS:
        raise ConfigError(
            f"unknown agentic preset {name!r}; choose one of {', '.join(AGENTIC_PRESETS)}"
        )
    return AGENTIC_PRESETS[name]
