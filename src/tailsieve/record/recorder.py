"""The rollout recorder: real prompt groups on live servers, written as a length trace.

It drives the live runtime (``TailSieveRollout`` with policy ``uniform-requests``: each
response dealt round-robin on its own, no cutoff, no moves, no continuation), so a recorded
response is exactly one uninterrupted request that ended on the model's own EOS (or at
``max_tokens``): nothing is forced (no ``ignore_eos``). Every prompt of an epoch runs once per
epoch; epoch ``e`` is the trace's ``step`` ``e``.

Seeds: every request carries its own sampling seed, derived from the run seed (``seed``, drawn
at random when not given and recorded in the info) and the prompt, epoch and sample index
(``record.seeds``). Unseeded requests (``seeded=False``) use the server's own generator, which
vLLM seeds with 0 on every server: two servers then draw the same numbers and siblings on them
can come out token-identical. vLLM is not batch-invariant, so a rerun with the same run seed is
not token-identical either (numerics depend on the batch a request ran in). vLLM CPU 0.32 kills
its engine when a seeded request's prefill is split into chunks (``RuntimeError: CPU Generator
does not use offset``): serve with ``--no-enable-chunked-prefill`` (docs/recorded-trace.md).

Every recording counts its exact sibling copies (``workload.copies``: responses of one group
with identical token ids) into the info; a clean recording has none.

Per response the trace holds: ``prompt_id``, ``step`` (epoch), ``sample``, ``response_tokens``,
``prompt_tokens`` (as the server tokenized the prompt, chat template applied), ``finish_reason``,
``correct`` (when the prompt has an ``answer``), ``replica`` (index into the endpoints),
``token_ids`` and, when streamed, ``chunk_times_s`` / ``chunk_tokens``.
"""

from __future__ import annotations

import datetime
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.record.math_problems import check_answer
from tailsieve.record.seeds import MAX_SEED, SEED_RULE, check_distinct, draw_run_seed, group_seed
from tailsieve.record.turn_recorder import write_info
from tailsieve.runtime import event_loop
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.engine.lean_http import LeanTransport
from tailsieve.runtime.engine.transport import Transport
from tailsieve.runtime.prompt_file import PromptSet
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_batch import RolloutBatch
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.workload.copies import sibling_copies
from tailsieve.workload.io import trace_suffix, write_trace
from tailsieve.workload.shipped import portable_path
from tailsieve.workload.trace import Trace


@dataclass(frozen=True, slots=True)
class RecordConfig:
    """Settings of one recording (sampling as the run uses it; validated here)."""

    group_size: int = 8  # n: samples per prompt and epoch
    num_epochs: int = 1  # each epoch runs every prompt once (the trace's step = epoch)
    first_epoch: int = 0  # index of the first epoch (a recording in parts: record.parts)
    groups_per_step: int | None = None  # prompts per rollout step; None: a whole epoch at once
    backend: Backend = Backend.VLLM_CHAT  # vllm-chat applies the model's chat template
    model: str | None = None  # served model name; None: the one the servers serve
    max_tokens: int = 1024
    temperature: float = 1.0
    top_p: float | None = None
    seed: int | None = None  # run seed of the per-request seeds; None: drawn at random
    seeded: bool = True  # False: requests carry no seed (the server's generator; module doc)
    stream: bool = False  # streamed: per-chunk arrival times are recorded
    stream_interval: int | None = None  # streamed vLLM: tokens per chunk
    request_timeout_s: float | None = 3600.0
    max_retries: int = 3

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", Backend(self.backend))
        for name in ("group_size", "num_epochs", "max_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.first_epoch < 0:
            raise ConfigError(f"first_epoch must be >= 0, got {self.first_epoch}")
        if self.groups_per_step is not None and self.groups_per_step < 1:
            raise ConfigError(f"groups_per_step must be >= 1, got {self.groups_per_step}")
        if not (math.isfinite(self.temperature) and 0 <= self.temperature <= 10):
            raise ConfigError(f"temperature must be in [0, 10], got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"seed must be in [0, 2**63 - 1], got {self.seed}")
        if self.seed is not None and not self.seeded:
            raise ConfigError("a run seed needs seeded requests (seeded=False sends none)")
        if self.stream_interval is not None and (self.stream_interval < 1 or not self.stream):
            raise ConfigError("stream_interval must be >= 1 and needs stream=True")
        if self.request_timeout_s is not None and self.request_timeout_s <= 0:
            raise ConfigError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p
        )

    @property
    def epochs(self) -> range:
        """The epochs this recording runs (the trace's steps)."""
        return range(self.first_epoch, self.first_epoch + self.num_epochs)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What one rollout step of the recording took."""

    epoch: int
    step: int  # rollout step index (over the whole recording)
    num_groups: int
    wall_s: float
    makespan_s: float
    generated_tokens: int


@dataclass(frozen=True, slots=True)
class Recording:
    """The recorded trace and how it was made (``info``: JSON-safe settings and context)."""

    trace: Trace
    info: dict[str, Any] = field(default_factory=dict)

    def write(self, path: str | Path) -> Path:
        """Write the trace (format by suffix) and ``<path>.info.json`` beside it; returns the
        info file's path."""
        write_trace(self.trace, path)
        return write_info(path, self.info)


@dataclass(slots=True)
class _Rows:
    """Trace columns being filled."""

    prompt_id: list[str] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    sample: list[int] = field(default_factory=list)
    response_tokens: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    finish_reason: list[str] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    replica: list[int] = field(default_factory=list)
    token_ids: list[tuple[int, ...]] = field(default_factory=list)
    chunk_times_s: list[tuple[float, ...]] = field(default_factory=list)
    chunk_tokens: list[tuple[int, ...]] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)  # columns some response did not give

    def add(self, batch: RolloutBatch, epoch: int, answers: dict[str, float]) -> None:
        for g in batch.groups:
            for i, r in enumerate(g.responses):
                self.prompt_id.append(g.prompt_id)
                self.step.append(epoch)
                self.sample.append(i)
                self.response_tokens.append(r.num_tokens)
                self.finish_reason.append(r.finish_reason)
                self.replica.append(g.response_replica(i))
                self._opt("prompt_tokens", r.prompt_token_ids, len)
                self._opt("token_ids", r.token_ids, tuple)
                self._opt("chunk_times_s", r.chunk_times_s, tuple)
                self._opt("chunk_tokens", r.chunk_tokens, tuple)
                if g.prompt_id in answers:
                    self.correct.append(check_answer(r.text, answers[g.prompt_id]))
                else:
                    self.missing.add("correct")

    def _opt(self, name: str, value: Any, conv: Callable[[Any], Any]) -> None:
        if value is None:
            self.missing.add(name)
        else:
            getattr(self, name).append(conv(value))

    def trace(self, source: str) -> Trace:
        cols = {
            c: getattr(self, c)
            for c in ("prompt_tokens", "correct", "token_ids", "chunk_times_s", "chunk_tokens")
            if c not in self.missing
        }
        return Trace.from_columns(
            prompt_id=self.prompt_id,
            response_tokens=self.response_tokens,
            sample=self.sample,
            step=self.step,
            finish_reason=self.finish_reason,
            replica=self.replica,
            source=source,
            **cols,
        )


async def record_rollouts(
    endpoints: Sequence[str],
    prompts: PromptSet | Sequence[PromptInput],
    config: RecordConfig,
    *,
    transport: Transport | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> Recording:
    """Run every prompt ``config.num_epochs`` times as groups of ``config.group_size`` on the
    servers at ``endpoints`` and return the recorded trace (see the module doc).

    Raises ``ReplicaError`` when a server does not answer ``/health`` at the start (all must),
    ``ConfigError`` for settings that do not fit the prompts."""
    pset = prompts if isinstance(prompts, PromptSet) else PromptSet(tuple(prompts), {}, "<api>")
    if not endpoints:
        raise ConfigError("need at least one endpoint")
    num = len(pset.prompts)
    if num == 0:
        raise ConfigError("no prompts to record")
    if len({p.prompt_id for p in pset.prompts}) != num:
        raise ConfigError("prompt ids must be unique")
    per_step = config.groups_per_step or num
    if num % per_step:
        raise ConfigError(f"groups_per_step {per_step} must divide the {num} prompts")
    run_seed = None
    if config.seeded:
        run_seed = draw_run_seed() if config.seed is None else config.seed
    by_epoch = {e: _with_seeds(pset.prompts, e, run_seed) for e in config.epochs}
    if run_seed is not None:
        check_distinct((p.seed or 0 for ps in by_epoch.values() for p in ps), config.group_size)
    rows = _Rows()
    steps: list[StepRecord] = []
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.perf_counter()
    async with TailSieveRollout(endpoints, _rollout_config(config, per_step),
                                transport=transport) as ro:
        down = [r for r in ro.executor.replicas if not r.healthy]
        if down:
            raise ReplicaError(
                "a recording needs every server: "
                + "; ".join(f"{r.url} does not answer /health ({r.reason})" for r in down)
            )
        model = ro.executor.config.model
        for epoch, seeded in by_epoch.items():
            for start in range(0, num, per_step):
                batch = await ro.step(list(seeded[start : start + per_step]))
                if ro.num_carried or len(batch.groups) != per_step:  # uniform-requests: never
                    raise ReplicaError(f"step {batch.step} did not deliver every group")
                rows.add(batch, epoch, pset.answers)
                rec = StepRecord(
                    epoch, batch.step, len(batch.groups), batch.metrics.wall_s,
                    batch.metrics.makespan_s, batch.metrics.generated_tokens,
                )  # fmt: skip
                steps.append(rec)
                if on_step is not None:
                    on_step(rec)
    wall_s = time.perf_counter() - t0
    trace = rows.trace(f"<recording of {portable_path(pset.source)}>")
    info = {
        "prompts": portable_path(pset.source),
        "num_prompts": num,
        "endpoints": list(endpoints),
        "served_model": model,
        "server_versions": await _server_versions(endpoints, transport),
        "config": {k: (v.value if isinstance(v, Backend) else v) for k, v in
                   asdict(config).items()},
        "run_seed": run_seed,
        "seed_rule": SEED_RULE if run_seed is not None else "unseeded requests",
        "started_utc": started.isoformat(timespec="seconds"),
        "wall_s": wall_s,
        "steps": [asdict(s) for s in steps],
        "sibling_copies": copies_info(trace),
    }
    return Recording(trace, info)


def _rollout_config(config: RecordConfig, per_step: int) -> RolloutConfig:
    return RolloutConfig(
        num_groups=per_step,
        group_size=config.group_size,
        policy="uniform-requests",
        backend=config.backend,
        model=config.model,
        sampling=config.sampling(),
        split_groups=True,
        stream=config.stream,
        stream_interval=config.stream_interval,
        request_timeout_s=config.request_timeout_s,
        max_retries=config.max_retries,
        return_token_ids=True,
        moves=False,  # one uninterrupted request per response (what is recorded)
    )


def _with_seeds(
    prompts: Sequence[PromptInput], epoch: int, run_seed: int | None
) -> tuple[PromptInput, ...]:
    """The prompts of one epoch, each carrying its group's base seed (None: unseeded)."""
    return tuple(
        replace(p, seed=None if run_seed is None else group_seed(run_seed, p.prompt_id, epoch))
        for p in prompts
    )


def copies_info(trace: Trace) -> dict[str, Any] | None:
    """The trace's exact sibling copies for the info file (None without token ids)."""
    return None if trace.token_ids is None else sibling_copies(trace).to_dict()


async def _server_versions(endpoints: Sequence[str], transport: Transport | None) -> list[str]:
    """``GET /version`` of each server (vLLM: ``{"version": ...}``); ``"unknown"`` when absent."""
    t = transport or LeanTransport()
    out: list[str] = []
    try:
        for url in endpoints:
            try:
                status, body = await t.get(url.rstrip("/") + "/version", 5.0)
                out.append(str(json.loads(body).get("version")) if status == 200 else "unknown")
            except (ReplicaError, ValueError, AttributeError):
                out.append("unknown")
    finally:
        if transport is None:
            await t.aclose()
    return out


def record(
    endpoints: Sequence[str],
    prompts: PromptSet | Sequence[PromptInput],
    config: RecordConfig,
    out: str | Path | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> Recording:
    """Blocking ``record_rollouts``; with ``out`` also writes the trace and its info file."""
    if out is not None and not trace_suffix(out):
        raise ConfigError(f"{out}: the trace file needs a suffix .jsonl, .jsonl.gz, .csv, "
                          ".csv.gz or .parquet")
    rec = event_loop.run(record_rollouts(endpoints, prompts, config, on_step=on_step))
    if out is not None:
        rec.write(out)
    return rec
