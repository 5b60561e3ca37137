"""``TailSieveRayPPOTrainer``: the smallest change to ``RayPPOTrainer`` that accepts a batch
whose prompts differ from the dataloader's.

``RayPPOTrainer.fit`` assembles the step's batch as ``batch.repeat(n).union(gen_output)``, and
``union`` asserts that both sides hold the same ``uid`` rows; TailSieve returns carried prompts
and holds fresh ones back, so verl rejects its batch. This subclass changes three things:

1. ``_get_gen_batch`` (called by ``fit`` right before generation) marks that step's input batch so
   that its ``repeat(n).union(gen_output)`` returns ``gen_output``: the generated batch is
   authoritative (it carries each row's own ``uid``/``data_source``/``reward_model``/
   ``extra_info``); the dataloader batch contributes only its ``meta_info``. Validation batches
   are not marked (validation answers every row in order, so verl's union holds).
2. The train dataloader yields ``num_fresh_needed()`` prompts per step (``TailSieveDataLoader``).
   The manager's training output is a ``WholeOnFirstSlice``, so ``fit``'s slice of it to the
   input's row count keeps all ``N x n`` rows.
3. ``_save_checkpoint``/``_load_checkpoint`` also write/read ``tailsieve.pt`` (carried and queued
   prompts, controller state) next to verl's ``data.pt``.

It also reads verl's own timings: while ``fit`` runs, its logger is verl's ``Tracking`` with
``log`` adding ``tailsieve/rollout_share`` (``timing_s/gen`` over ``timing_s/step``) and
``tailsieve/step_speedup_ceiling`` to each step's metrics (``steps.verl_step_share``), and the
trainer logs the share once a step.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from tailsieve.integrations.verl.dataloader import TailSieveDataLoader
from tailsieve.integrations.verl.steps import verl_step_share

logger = logging.getLogger(__name__)
STATE_FILE = "tailsieve.pt"


class _RepeatsToAdopt(DataProto):
    """A dataloader batch whose ``repeat`` result adopts the generated batch on ``union``."""

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        out = DataProto.repeat(self, repeat_times=repeat_times, interleave=interleave)
        out.__class__ = _AdoptsOnUnion
        return out


class _AdoptsOnUnion(DataProto):
    def union(self, other: DataProto) -> DataProto:
        meta = {**self.meta_info, **other.meta_info}
        return DataProto(
            batch=other.batch, non_tensor_batch=dict(other.non_tensor_batch), meta_info=meta
        )


class WholeOnFirstSlice(DataProto):
    """The manager's training output: ``fit`` slices it to the *input* row count
    (``combined_gen_output.slice(0, num_sampled_prompts)``), which differs from TailSieve's
    ``N x n`` rows; that first slice from 0 returns every row (as a plain ``DataProto``)."""

    def slice(
        self, start: int | None = None, end: int | None = None, step: int | None = None
    ) -> DataProto:
        whole = DataProto(self.batch, self.non_tensor_batch, self.meta_info)
        if not start and step in (None, 1):
            return whole
        return whole.slice(start, end, step)


def adopt_generated_batch(batch: DataProto) -> None:
    """Make ``batch.repeat(n).union(gen_output)`` return ``gen_output`` (plus meta_info)."""
    batch.__class__ = _RepeatsToAdopt


def with_step_share(tracking: type) -> type:
    """A subclass of verl's ``Tracking`` whose ``log`` adds ``verl_step_share(data)``."""

    class StepShareTracking(tracking):  # type: ignore[misc,valid-type,unused-ignore]
        def log(self, data: Any, step: Any, backend: Any = None) -> None:
            extra = verl_step_share(data) if isinstance(data, dict) else {}
            if extra:
                logger.info("TailSieve: step %s: the rollout took %.1f%% of the training step",
                            step, 100 * extra["tailsieve/rollout_share"])
            super().log({**data, **extra} if extra else data, step, backend)

    return StepShareTracking


class TailSieveRayPPOTrainer(RayPPOTrainer):
    """``RayPPOTrainer`` for ``TailSieveAgentLoopManager`` (see the module docstring)."""

    _tailsieve_validating = False
    train_dataloader: Any

    def _create_dataloader(
        self, train_dataset: Any, val_dataset: Any, collate_fn: Any, train_sampler: Any
    ) -> None:
        super()._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)
        inner: Any = self.train_dataloader
        self.train_dataloader = TailSieveDataLoader(
            dataset=inner.dataset,
            collate_fn=inner.collate_fn,
            sampler=inner.sampler,
            need=self._tailsieve_need,
            nominal_batch_size=int(self.config.data.train_batch_size),
            num_workers=int(self.config.data.get("dataloader_num_workers", 0)),
        )

    def fit(self) -> Any:
        """verl's ``fit`` with its logger adding the rollout's share of each step (the module
        docstring)."""
        from verl.utils import tracking

        inner = tracking.Tracking
        tracking.Tracking = with_step_share(inner)  # type: ignore[misc,unused-ignore]
        try:
            return super().fit()
        finally:
            tracking.Tracking = inner  # type: ignore[misc,unused-ignore]

    def _tailsieve_need(self) -> int:
        return int(self.async_rollout_manager.num_fresh_needed())

    def _get_gen_batch(self, batch: DataProto) -> DataProto:
        gen_batch = super()._get_gen_batch(batch)
        if not self._tailsieve_validating:
            adopt_generated_batch(batch)
        return gen_batch

    def _validate(self, merged: bool = False) -> Any:
        self._tailsieve_validating = True
        try:
            return super()._validate(merged=merged)
        finally:
            self._tailsieve_validating = False

    def _tailsieve_path(self) -> str:
        step_dir = f"global_step_{self.global_steps}"
        return os.path.join(self.config.trainer.default_local_dir, step_dir, STATE_FILE)

    def _save_checkpoint(self) -> None:
        path = self._tailsieve_path()  # written first: no checkpoint is marked done without it
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(self.async_rollout_manager.state_dict(), path)
        super()._save_checkpoint()

    def _load_checkpoint(self) -> Any:
        out = super()._load_checkpoint()
        if self.global_steps > 0:
            path = self._tailsieve_path()
            data = os.path.join(os.path.dirname(path), "data.pt")
            if os.path.exists(data):  # verl skips it when global_steps % len(loader) == 0,
                # but a TailSieve epoch has no fixed step count: always resume in place
                self.train_dataloader.load_state_dict(torch.load(data, weights_only=False))
            if os.path.exists(path):
                self.async_rollout_manager.load_state_dict(torch.load(path, weights_only=False))
            else:
                logger.warning(
                    "no %s in the checkpoint: TailSieve starts without carried prompts", path
                )
        return out
