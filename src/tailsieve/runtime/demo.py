"""The embedded default job: Uniform, per-request round-robin and TailSieve on emulated
replicas, end to end.

Starts emulated replicas (vLLM- and SGLang-compatible) on loopback (time-scaled GPU-shaped
profile), replays a synthetic workload through the real live runtime (HTTP, cutoff, aborts) with every policy,
interleaved step by step on the same prompts and lengths, and writes a run folder that
``tailsieve report`` renders.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from tailsieve.control.config import ControllerConfig
from tailsieve.core.timeline import StepTimeline
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.emulator.protocol import text_ids
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.step.observe import StepMetrics
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_batch import RolloutBatch
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.step.step_state import StepProgress
from tailsieve.sim.driver import PairedLengths, epoch_prompt_ids
from tailsieve.sim.speedup_stats import STEADY_FROM, ratios_by_step
from tailsieve.workload import load_workload

STEADY_STEPS = 3
# the controller's default seam (modelled seconds per move beyond its prefill)
_MODEL_SEAM_S = float(next(f.default for f in fields(ControllerConfig) if f.name == "seam_s"))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """Shape of the demo (defaults: the embedded default job)."""

    replicas: int = 8
    groups: int = 64
    group_size: int = 8
    steps: int = 10  # steps after the warm-up step
    workload: str = "paper-math"
    profile: str = DEFAULT_PROFILE  # derived Qwen3-4B on one H100 (tailsieve profiles)
    time_scale: float = 0.05  # emulated seconds per modelled second (~4 min for the default
    # job; at 0.02 the router's per-move work on a 2-core machine outweighs the moves' gain)
    seed: int = 0
    policies: tuple[str, ...] = ("uniform", "uniform-requests", "tailsieve")
    out_dir: Path = Path("demo-out")
    moves: bool = True  # tailsieve runs with continuation and the live rebalancer
    backend: Backend = Backend.SGLANG  # the emulated replicas' API the router speaks (sglang:
    # a move aborts the running request, which returns its partial output; vllm: unstreamed
    # pieces of ``piece_tokens``, a move waits for the piece's end)
    piece_tokens: int | None = None  # moves on vllm: tokens per piece (None: moves.PIECE_TOKENS)

    def __post_init__(self) -> None:
        if self.replicas < 2:
            raise ConfigError(f"the demo needs at least 2 replicas, got {self.replicas}")
        if self.groups < 2 or self.group_size < 1 or self.steps < 1:
            raise ConfigError("groups >= 2, group_size >= 1 and steps >= 1 are required")
        if not (0 < self.time_scale <= 10):
            raise ConfigError(f"time_scale must be in (0, 10], got {self.time_scale}")
        object.__setattr__(self, "backend", Backend(self.backend))
        if self.backend is Backend.VLLM_CHAT:
            raise ConfigError("the demo runs the vllm or the sglang backend, not vllm-chat")
        if "uniform" not in self.policies:
            raise ConfigError("the demo compares against 'uniform'; include it in policies")


class StepLengths:
    """Forced response lengths for the live runtime: the simulator's ``PairedLengths``
    (a function of prompt, step and seed) at the step being run, so a regenerated candidate
    gets a fresh draw for the step it runs in and the demo replays what ``simulate`` would."""

    def __init__(self, workload: Any, group_size: int, seed: int) -> None:
        self.lengths = PairedLengths(workload, group_size, seed)
        self.step = 0

    def __call__(self, prompt_id: str, sample: int) -> int:
        return max(1, int(self.lengths(prompt_id, self.step)[sample]))


@dataclass(slots=True)
class PolicyResult:
    """Everything recorded for one policy."""

    policy: str
    metrics: list[StepMetrics] = field(default_factory=list)
    timelines: list[StepTimeline] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    def regular(self) -> list[StepMetrics]:
        return [m for m in self.metrics if not m.is_flush]

    def steady_from(self) -> int:
        """First step of the paired statistic: ``STEADY_FROM``, or 1 (after the warm-up) when
        the run is too short to have steps past it."""
        last = max((m.step for m in self.regular()), default=0)
        return STEADY_FROM if last >= STEADY_FROM else 1

    def paired_over(self, ref: PolicyResult) -> dict[int, float]:
        """step -> ``T_ref / T_self`` over the steady steps both ran."""
        return ratios_by_step({m.step: m.makespan_s for m in ref.regular()},
                              {m.step: m.makespan_s for m in self.regular()}, self.steady_from())

    def summary(
        self, uniform: PolicyResult | None, requests: PolicyResult | None = None
    ) -> dict[str, Any]:
        """Step times, trajectories, waste, and the paired speedups over ``uniform`` and over
        ``requests`` (per-request round-robin, the baseline a user already has)."""
        reg = self.regular()
        steady = float(np.mean([m.makespan_s for m in reg[-STEADY_STEPS:]]))
        after_warmup = float(np.mean([m.makespan_s for m in reg[1:]] or [0.0]))
        gen = sum(m.generated_tokens for m in self.metrics)
        out: dict[str, Any] = {
            "policy": self.policy,
            "steady_step_s": steady,
            "mean_step_s": after_warmup,
            "q_trajectory": [m.q for m in reg],
            "m_trajectory": [m.m for m in reg],
            "wasted_token_fraction": sum(m.wasted_tokens for m in self.metrics) / gen
            if gen
            else 0.0,
            "speedup_vs_uniform": None,
            "mean_speedup_vs_uniform": None,
            "paired_speedup": None,  # mean of per-step T_uniform / T_policy over paired_steps
            "paired_steps": [],
            "paired_speedup_vs_requests": None,  # the same, over uniform-requests
            "moves_per_step": float(np.mean([float(m.num_moves) for m in reg] or [0.0])),
            "moved_tokens_per_step": float(np.mean([float(m.moved_tokens) for m in reg] or [0.0])),
        }
        if requests is not None and requests is not self:
            over = self.paired_over(requests)
            if over:
                out["paired_speedup_vs_requests"] = float(np.mean(list(over.values())))
        if uniform is not None:
            ratios = self.paired_over(uniform)
            if ratios:
                out["paired_speedup"] = float(np.mean(list(ratios.values())))
                out["paired_steps"] = list(ratios)
            u = uniform.summary(None)
            out["speedup_vs_uniform"] = u["steady_step_s"] / steady if steady else None
            out["mean_speedup_vs_uniform"] = (
                u["mean_step_s"] / after_warmup if after_warmup else None
            )
        return out


def _prompt_stream(workload: Any, seed: int, as_ids: bool = False) -> Iterator[PromptInput]:
    """The simulator's prompt order (``epoch_prompt_ids``): ``tailsieve simulate --seed S
    --num-prompts P`` with the demo's P = 4 N (steps + 2) replays the same steps. ``as_ids``:
    the prompts as token ids (SGLang does not echo a text prompt's ids, and a continuation
    needs them): the ids the emulator gives the same text, so both are alike."""
    for pid in epoch_prompt_ids(workload.prompt_ids(), seed):
        text = f"Solve problem {pid}."
        yield PromptInput(pid, token_ids=text_ids(text)) if as_ids else PromptInput(pid, text=text)


def _rollout_config(
    policy: str, cfg: DemoConfig, lengths: StepLengths, controller_profile: Path
) -> RolloutConfig:
    moves = cfg.moves and policy == "tailsieve"
    return RolloutConfig(
        num_groups=cfg.groups,
        group_size=cfg.group_size,
        policy=policy,
        model="tailsieve-emulated",
        # a chained response does not keep a per-request seed (rollout warns): none with moves
        sampling=SamplingParams(max_tokens=32768, temperature=0.7,
                                seed=None if cfg.moves else cfg.seed),
        replay=lengths,
        profile=str(controller_profile),
        # moves: pieces of at most piece_tokens; the controller's seam in emulated seconds (the
        # profile is scaled by time_scale, so is the seam)
        backend=cfg.backend,
        moves=moves,
        piece_tokens=cfg.piece_tokens if moves and cfg.backend is Backend.VLLM else None,
        controller={"seam_s": _MODEL_SEAM_S * cfg.time_scale} if moves else {},
    )


@dataclass(slots=True)
class _Lane:
    """One policy's rollout inside the interleaved demo."""

    ro: TailSieveRollout
    lengths: StepLengths
    prompts: Iterator[PromptInput]
    result: PolicyResult


async def run_interleaved(
    cfg: DemoConfig,
    urls: list[str],
    workload: Any,
    controller_profile: Path,
    on_progress: Callable[[StepProgress], None] | None = None,
) -> dict[str, PolicyResult]:
    """Warm-up plus ``cfg.steps`` steps of every policy, interleaved step by step (step t of
    each policy, then step t + 1), then a flush for carried prompts. Emulated time follows the
    wall clock, so a slower machine lengthens every step; interleaving puts each pair of
    compared steps at the same moment, which keeps the paired ratio fair under varying load."""
    async with AsyncExitStack() as stack:
        lanes: dict[str, _Lane] = {}
        for policy in cfg.policies:
            lengths = StepLengths(workload, cfg.group_size, cfg.seed)
            rcfg = _rollout_config(policy, cfg, lengths, controller_profile)
            ro = await stack.enter_async_context(
                TailSieveRollout(urls, rcfg, on_progress=on_progress)
            )
            prompts = _prompt_stream(workload, cfg.seed, as_ids=cfg.backend is Backend.SGLANG)
            lanes[policy] = _Lane(ro, lengths, prompts, PolicyResult(policy))
        for t in range(cfg.steps + 1):
            for lane in lanes.values():
                lane.lengths.step = t
                need = lane.ro.num_fresh_needed()
                batch = await lane.ro.step([next(lane.prompts) for _ in range(need)])
                record_batch(lane.result, batch)
        for lane in lanes.values():
            lane.lengths.step = cfg.steps + 1
            last = await lane.ro.flush()
            if last is not None:
                record_batch(lane.result, last)
    return {p: lane.result for p, lane in lanes.items()}


def record_batch(res: PolicyResult, batch: RolloutBatch) -> None:
    """Add one delivered batch to a policy's record."""
    res.metrics.append(batch.metrics)
    if batch.timeline is not None:
        res.timelines.append(batch.timeline)
    for g in batch.groups:
        res.lengths.extend(r.num_tokens for r in g.responses)


async def run_demo(
    cfg: DemoConfig,
    on_progress: Callable[[StepProgress], None] | None = None,
    on_policy: Callable[[str], None] | None = None,
) -> dict[str, PolicyResult]:
    """Start the emulators, run every policy (interleaved step by step), stop the emulators,
    write the run folder. ``on_policy`` receives the policies' names once, before they run."""
    out = cfg.out_dir
    workload = load_workload(
        cfg.workload, num_prompts=4 * cfg.groups * (cfg.steps + 2), seed=cfg.seed
    )
    scaled = load_profile(cfg.profile).scaled(cfg.time_scale, name=f"{cfg.profile}-scaled")
    out.mkdir(parents=True, exist_ok=True)  # only once the inputs loaded
    profile_path = out / "controller_profile.json"
    scaled.save(profile_path)
    with EmulatorFleet.start(
        cfg.replicas,
        profile=cfg.profile,
        time_scale=cfg.time_scale,
        log_dir=out / "emulator-logs",
        startup_timeout_s=180.0,
        max_model_len=65536,
        max_num_seqs=4096,
        seed=cfg.seed,
    ) as fleet:
        if on_policy is not None:
            on_policy(", ".join(cfg.policies))
        results = await run_interleaved(cfg, fleet.urls, workload, profile_path, on_progress)
    write_run(cfg, results)
    return results


def summaries(results: dict[str, PolicyResult]) -> list[dict[str, Any]]:
    uniform, requests = results.get("uniform"), results.get("uniform-requests")
    return [r.summary(uniform, requests) for r in results.values()]


def timeline_step(results: dict[str, PolicyResult], last_step: int) -> int | None:
    """The step whose per-replica timelines the report shows side by side for every policy:
    the last regular step at which a non-uniform policy used a tail pool (else the last
    regular step all policies ran)."""
    steps = [{t.step for t in r.timelines if t.step <= last_step} for r in results.values()]
    common = set.intersection(*steps) if steps else set()
    with_tail = {
        t.step
        for pol, r in results.items()
        if pol != "uniform"
        for t in r.timelines
        if t.m > 0 and t.step in common
    }
    pick = with_tail or common
    return max(pick) if pick else None


def write_run(cfg: Any, results: dict[str, PolicyResult],
              extra: dict[str, Any] | None = None) -> None:
    """``demo.json`` (settings + summaries), ``steps.jsonl``, ``timelines.json``, ``batches/``.
    ``cfg``: the demo's config dataclass (``out_dir``, ``steps``, ``policies``); ``extra``:
    more settings to record."""
    out = cfg.out_dir
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}
    settings["policies"] = list(cfg.policies)
    settings.update(extra or {})
    (out / "demo.json").write_text(
        json.dumps({"settings": settings, "policies": summaries(results)}, indent=1) + "\n"
    )
    with (out / "steps.jsonl").open("w") as f:
        for r in results.values():
            for m in r.metrics:
                f.write(json.dumps(asdict(m)) + "\n")
    step = timeline_step(results, cfg.steps)
    timelines = {
        pol: t.to_dict()
        for pol, r in results.items()
        for t in r.timelines
        if step is not None and t.step == step
    }
    (out / "timelines.json").write_text(json.dumps(timelines) + "\n")
    for pol, r in results.items():
        folder = out / "batches" / pol
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "step_all.jsonl").write_text(
            "".join(json.dumps({"response_tokens": n}) + "\n" for n in r.lengths)
        )
