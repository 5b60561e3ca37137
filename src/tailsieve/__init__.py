"""TailSieve: partial-rollout-guided tail routing for synchronous LLM rollouts.

The public API, importable from the top level (loaded on first use, so ``import tailsieve``
stays fast)::

    from tailsieve import TailSieveRollout, RolloutConfig, PromptInput, SamplingParams
    from tailsieve import simulate, load_profile, load_workload, read_trace

Everything else lives in the subpackages (``tailsieve.runtime``, ``tailsieve.sim``,
``tailsieve.oracle``, ``tailsieve.workload``, ``tailsieve.control``, ``tailsieve.core``,
``tailsieve.model``, ``tailsieve.report``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # live rollouts (the trainer-facing API)
    "TailSieveRollout": "tailsieve.runtime.step.rollout",
    "RolloutConfig": "tailsieve.runtime.step.rollout_config",
    "RolloutBatch": "tailsieve.runtime.step.rollout_batch",
    "PromptInput": "tailsieve.runtime.engine.backends",
    "SamplingParams": "tailsieve.runtime.engine.backends",
    "Backend": "tailsieve.runtime.engine.backends",
    "GroupResponses": "tailsieve.runtime.step.step_state",
    "resolve_served_model": "tailsieve.runtime.engine.served_models",
    # local servers: real vLLM and the emulator
    "LaunchConfig": "tailsieve.runtime.launcher",
    "VllmFleet": "tailsieve.runtime.launcher",
    "EmulatorConfig": "tailsieve.runtime.emulator",
    "EmulatorFleet": "tailsieve.runtime.emulator",
    "run_emulator": "tailsieve.runtime.emulator",
    # simulation, models, workloads, oracle, report
    "simulate": "tailsieve.sim.api",
    "SimulationResult": "tailsieve.sim.api",
    "load_profile": "tailsieve.model.profiles",
    "ThroughputModel": "tailsieve.model.throughput",
    "load_workload": "tailsieve.workload.presets",
    "read_trace": "tailsieve.workload.io",
    "write_trace": "tailsieve.workload.io",
    "solve_two_replicas": "tailsieve.oracle",
    "topk_sweep": "tailsieve.oracle",
    "write_report": "tailsieve.report.html_report",
    # errors
    "TailSieveError": "tailsieve.errors",
    "ConfigError": "tailsieve.errors",
}

__all__ = [
    "Backend",
    "ConfigError",
    "EmulatorConfig",
    "EmulatorFleet",
    "GroupResponses",
    "LaunchConfig",
    "PromptInput",
    "RolloutBatch",
    "RolloutConfig",
    "SamplingParams",
    "SimulationResult",
    "TailSieveError",
    "TailSieveRollout",
    "ThroughputModel",
    "VllmFleet",
    "__version__",
    "load_profile",
    "load_workload",
    "read_trace",
    "resolve_served_model",
    "run_emulator",
    "simulate",
    "solve_two_replicas",
    "topk_sweep",
    "write_report",
    "write_trace",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tailsieve' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static analysers see the real objects
    from tailsieve.errors import ConfigError, TailSieveError
    from tailsieve.model.profiles import load_profile
    from tailsieve.model.throughput import ThroughputModel
    from tailsieve.oracle import solve_two_replicas, topk_sweep
    from tailsieve.report.html_report import write_report
    from tailsieve.runtime.emulator import EmulatorConfig, EmulatorFleet, run_emulator
    from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
    from tailsieve.runtime.engine.served_models import resolve_served_model
    from tailsieve.runtime.launcher import LaunchConfig, VllmFleet
    from tailsieve.runtime.step.rollout import TailSieveRollout
    from tailsieve.runtime.step.rollout_batch import RolloutBatch
    from tailsieve.runtime.step.rollout_config import RolloutConfig
    from tailsieve.runtime.step.step_state import GroupResponses
    from tailsieve.sim.api import SimulationResult, simulate
    from tailsieve.workload.io import read_trace, write_trace
    from tailsieve.workload.presets import load_workload
