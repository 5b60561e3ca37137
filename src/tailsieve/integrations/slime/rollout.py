"""``generate_rollout`` for ``--rollout-function-path tailsieve.integrations.slime.generate_rollout``.

One call = one TailSieve step over slime's SGLang workers (``/generate``, one request per
sample, per-request abort). It returns exactly ``--rollout-batch-size`` groups of
``--n-samples-per-prompt`` samples: prompts carried from the previous step first (regenerated
from scratch), then new prompts from the data source; the new prompts cut off this step stay in
the data source's TailSieve session for the next call. Rewards are computed with slime's
``rm_hub`` (``--rm-type`` / ``--custom-rm-path``, ``--group-rm``) as slime's default rollout does.
Evaluation calls go to slime's default ``sglang_rollout.generate_rollout``.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.integrations.slime.samples import fill
from tailsieve.integrations.slime.session import TailSieveSlimSession
from tailsieve.runtime.step.rollout_batch import RolloutBatch


@dataclass
class TrainOutput:
    """Used only when slime is not importable: the fields of slime's ``RolloutFnTrainOutput``."""

    samples: list[list[Any]]
    metrics: dict[str, Any] = field(default_factory=dict)


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's rollout-function interface; see the module docstring."""
    if evaluation:
        from slime.rollout.sglang_rollout import generate_rollout as slime_generate_rollout

        return slime_generate_rollout(args, rollout_id, data_source, evaluation=True)
    session = getattr(data_source, "tailsieve", None)
    if not isinstance(session, TailSieveSlimSession):
        raise ConfigError(
            "generate_rollout needs --data-source-path "
            "tailsieve.integrations.slime.TailSieveDataSource"
        )
    need = session.num_fresh_needed()
    fresh = data_source.get_samples(need) if need > 0 else []
    if len(fresh) < need:
        raise ConfigError(f"the data source gave {len(fresh)} groups, TailSieve needs {need}")
    batch = session.step(session.add(fresh))
    groups = deliver(session, batch, rollout_id)
    session.run(_rewards(args, groups))
    groups.sort(key=lambda g: (g[0].index is None, g[0].index))
    out_cls = _train_output_class()
    return out_cls(samples=groups, metrics=batch.metrics.logged())


def deliver(session: TailSieveSlimSession, batch: RolloutBatch, rollout_id: int) -> list[list[Any]]:
    """The delivered groups as filled slime samples; they leave the session's held set."""
    n, want = session.settings.group_size, session.settings.num_groups
    if len(batch.groups) != want:
        raise ConfigError(f"TailSieve delivered {len(batch.groups)} groups, expected {want}")
    out = []
    for g in batch.groups:
        held = session.held.pop(g.prompt_id)
        if len(g.responses) != n:
            raise ConfigError(f"group {g.prompt_id!r}: {len(g.responses)} responses, expected {n}")
        info = {
            "pool": g.pool.value,
            "replica": g.replica,
            "step": batch.step,
            "rollout_id": rollout_id,
        }
        for sample, response in zip(held.samples, g.responses, strict=True):
            fill(sample, held.prompt_ids, response, info)
        out.append(held.samples)
    return out


async def _rewards(args: Any, groups: Sequence[list[Any]]) -> None:
    single, batched = _reward_functions(args)
    if getattr(args, "group_rm", False):
        results = await asyncio.gather(*(batched(args, g) for g in groups))
        for g, rewards in zip(groups, results, strict=True):
            for s, r in zip(g, rewards, strict=True):
                s.reward = r
        return
    todo = [s for g in groups for s in g if s.reward is None]
    rewards = await asyncio.gather(*(single(args, s) for s in todo))
    for s, r in zip(todo, rewards, strict=True):
        s.reward = r


def _reward_functions(
    args: Any,
) -> tuple[Callable[[Any, Any], Awaitable[Any]], Callable[[Any, list[Any]], Awaitable[Any]]]:
    """slime's ``async_rm``/``batched_async_rm``; without slime, ``--custom-rm-path`` alone."""
    try:
        from slime.rollout.rm_hub import async_rm, batched_async_rm

        return async_rm, batched_async_rm
    except ImportError:
        path = getattr(args, "custom_rm_path", None)
        if not path:
            raise ConfigError("slime is not importable: set custom_rm_path") from None
        module, _, name = path.rpartition(".")
        fn = getattr(importlib.import_module(module), name)
        return fn, fn


def _train_output_class() -> Any:
    try:
        from slime.rollout.base_types import RolloutFnTrainOutput

        return RolloutFnTrainOutput
    except ImportError:
        return TrainOutput
