"""The demo on a real model: Uniform, per-request round-robin and TailSieve on real vLLM
servers serving a real model (SmolLM2-135M-Instruct from PyPI, ``scripts/setup_real_model.sh``),
with the lengths the model chooses itself.

It starts the servers (or uses running ones), measures their decode curve in lockstep for the
controllers' throughput model (``runtime.profiler``), and runs every policy on the same shipped
math word problems (chat prompts; with moves they go as the server's token ids,
``LiveExecutor.chat_as_tokens``), interleaved step by step, at temperature 1 with natural EOS. Unlike
the emulated demo, the policies do not replay the same lengths: each samples its own responses
to the same prompts, so a paired step ratio also holds sampling noise, and a few steps on two
CPU servers say more about the mechanics (moves, cutoffs, exactly-once) than about the speedup.
The run folder has the emulated demo's layout (``demo.json``, ``steps.jsonl``, timelines,
``tailsieve report``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

from tailsieve.errors import ConfigError
from tailsieve.runtime.demo import PolicyResult, record_batch, write_run
from tailsieve.runtime.engine.backends import Backend, SamplingParams
from tailsieve.runtime.launcher import LaunchConfig, VllmFleet
from tailsieve.runtime.profile_fit import mean_profile
from tailsieve.runtime.profiler import ProfileSettings, profile_endpoints
from tailsieve.runtime.prompt_file import read_prompt_set
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.step.step_state import StepProgress

DEFAULT_MODEL_DIR = Path(".cache/smollm2-135m-instruct")
PROFILE_BATCH_SIZES = (1, 4, 16)


@dataclass(frozen=True, slots=True)
class RealDemoConfig:
    """Shape of the real-model demo (defaults: two one-core vLLM CPU servers, a few minutes)."""

    model_dir: Path | None = DEFAULT_MODEL_DIR  # launch servers for this model (None: endpoints)
    endpoints: tuple[str, ...] = ()  # running servers to use instead of launching
    replicas: int = 2
    groups: int = 8
    group_size: int = 4
    steps: int = 3  # steps after the warm-up step
    max_tokens: int = 512  # cap per response (the model stops earlier on its own, mostly)
    temperature: float = 1.0
    prompts: str = "math"  # prompt set: shipped name or JSONL path
    seed: int = 0  # unused by the sampler (seeded requests are not kept across a seam)
    policies: tuple[str, ...] = ("uniform", "uniform-requests", "tailsieve")
    out_dir: Path = Path("demo-real-out")
    python: str | None = None  # vLLM venv's python (default $TAILSIEVE_VLLM_PYTHON, .venv-vllm)
    base_port: int = 8201
    served_model_name: str = "smollm2"
    max_model_len: int = 2048

    def __post_init__(self) -> None:
        if self.model_dir is None and not self.endpoints:
            raise ConfigError("the real-model demo needs --real-model DIR or --endpoints URLs")
        if self.model_dir is not None and not (Path(self.model_dir) / "config.json").is_file():
            raise ConfigError(
                f"{self.model_dir}: no model there (config.json); build it with "
                "bash scripts/setup_real_model.sh")
        if self.groups < 2 or self.group_size < 1 or self.steps < 1 or self.replicas < 1:
            raise ConfigError("groups >= 2, group_size >= 1, steps >= 1, replicas >= 1")
        if not 1 <= self.max_tokens < self.max_model_len:
            raise ConfigError(f"max_tokens must be in [1, {self.max_model_len - 1}]")
        if "uniform" not in self.policies:
            raise ConfigError("the demo compares against 'uniform'; include it in policies")

    def vllm_python(self) -> str:
        if self.python:
            return self.python
        env = os.environ.get("TAILSIEVE_VLLM_PYTHON")
        return env or (".venv-vllm/bin/python" if Path(".venv-vllm/bin/python").exists()
                       else "python")


async def run_real_demo(
    cfg: RealDemoConfig,
    on_progress: Callable[[StepProgress], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> dict[str, PolicyResult]:
    """Start (or use) the servers, profile them, run every policy interleaved, write the run
    folder."""
    say = on_stage or (lambda _: None)
    source = read_prompt_set(cfg.prompts).prompts
    need = cfg.groups * (cfg.steps + 2) * 2  # every step's N plus the extras it launches
    if len(source) < need:
        raise ConfigError(f"{cfg.prompts}: {len(source)} prompts, the demo needs {need}")
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        urls = list(cfg.endpoints)
        if not urls:
            assert cfg.model_dir is not None
            ncpu = os.cpu_count() or 1
            fleet = VllmFleet(LaunchConfig(
                model=str(cfg.model_dir), replicas=cfg.replicas, base_port=cfg.base_port,
                python=cfg.vllm_python(), cores=tuple(i % ncpu for i in range(cfg.replicas)),
                served_model_name=cfg.served_model_name, max_model_len=cfg.max_model_len,
                log_dir=str(out / "vllm-logs")))
            say(f"starting {cfg.replicas} vLLM servers for {cfg.model_dir} (about 30 s)")
            urls = (await stack.enter_async_context(fleet)).endpoints
        say(f"profiling {len(urls)} servers in lockstep (batch sizes "
            f"{', '.join(map(str, PROFILE_BATCH_SIZES))})")
        measured = await profile_endpoints([
            ProfileSettings(endpoint=u, batch_sizes=PROFILE_BATCH_SIZES, tokens=64) for u in urls])
        profile_path = out / "controller_profile.json"
        mean_profile(measured, "demo-real-measured").save(profile_path)
        say(f"policies {', '.join(cfg.policies)}, interleaved step by step")
        lanes: dict[str, tuple[TailSieveRollout, PolicyResult]] = {}
        for policy in cfg.policies:
            rcfg = RolloutConfig(
                num_groups=cfg.groups, group_size=cfg.group_size, policy=policy,
                backend=Backend.VLLM_CHAT, profile=str(profile_path),
                sampling=SamplingParams(max_tokens=cfg.max_tokens, temperature=cfg.temperature),
                request_timeout_s=1800.0)
            ro = await stack.enter_async_context(
                TailSieveRollout(urls, rcfg, on_progress=on_progress))
            lanes[policy] = (ro, PolicyResult(policy))
        used = dict.fromkeys(cfg.policies, 0)
        for _ in range(cfg.steps + 1):
            for policy, (ro, res) in lanes.items():
                k = ro.num_fresh_needed()
                record_batch(res, await ro.step(source[used[policy]:used[policy] + k]))
                used[policy] += k
        for ro, res in lanes.values():
            last = await ro.flush()
            if last is not None:
                record_batch(res, last)
    results = {p: res for p, (_, res) in lanes.items()}
    write_run(cfg, results, {"real_model": True, "endpoints": urls})
    return results

