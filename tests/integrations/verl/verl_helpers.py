"""Helpers for the verl adapter tests: verl's real config, prompts as verl's dataset and
trainer build them, a local reward-loop worker.

These tests need verl 0.9.1 (``bash scripts/setup_verl.sh`` makes ``.venv-verl``); in an
environment without verl every test here is skipped.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

import verl
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.utils.dataset.rl_dataset import collate_fn

from tailsieve.integrations.loop_thread import LoopThread

ROOT = Path(__file__).resolve().parents[3]
MANAGER = "tailsieve.integrations.verl.TailSieveAgentLoopManager"
REWARD_FN = str(Path(__file__).with_name("reward_fn.py"))
NUM_GROUPS, GROUP_SIZE = 4, 2
PROMPT_LEN, RESPONSE_LEN = 64, 32


def tiny_model_dir() -> str:
    for cand in (
        os.environ.get("TAILSIEVE_TINY_MODEL_DIR"),
        str(ROOT / ".cache" / "tiny-qwen2"),
        "/work/main/.cache/tiny-qwen2",
    ):
        if cand and (Path(cand) / "config.json").exists():
            return cand
    pytest.skip("no tiny model (python scripts/build_tiny_model.py .cache/tiny-qwen2)")


def verl_config(endpoints: list[str], *extra: str) -> Any:
    """verl's real ``ppo_trainer`` config with TailSieve switched on."""
    cfg_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    overrides = [
        f"actor_rollout_ref.model.path={tiny_model_dir()}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={GROUP_SIZE}",
        f"actor_rollout_ref.rollout.prompt_length={PROMPT_LEN}",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
        f"data.train_batch_size={NUM_GROUPS}",
        f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER}",
        f"reward.custom_reward_function.path={REWARD_FN}",
        "reward.custom_reward_function.name=compute_score",
        "algorithm.adv_estimator=grpo",
        f"+tailsieve.endpoints=[{','.join(endpoints)}]",
        "+tailsieve.profile=cpu",
        # start isolated (a tail pool, a cutoff, carried prompts): the default m0 = 0 starts in
        # balance, which carries nothing, and these tests exercise the carry path
        "+tailsieve.controller.m0=1",
        *extra,
    ]
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def dataset_row(i: int) -> dict[str, Any]:
    """One row as verl's ``RLHFDataset.__getitem__`` returns it (text-only)."""
    import torch

    words = " ".join(["word"] * (1 + i % 5))
    return {
        "data_source": "tailsieve/test",
        "raw_prompt": [{"role": "user", "content": f"question {i}: {words}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": f"gt-{i}"},
        "extra_info": {"index": i, "tag": f"p{i}"},
        "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
        "index": i,
        "tools_kwargs": {},
        "interaction_kwargs": {},
    }


def trainer_batch(rows: list[dict[str, Any]]) -> DataProto:
    """What ``RayPPOTrainer.fit`` holds after ``from_single_dict`` and adding ``uid``."""
    batch = DataProto.from_single_dict(collate_fn(rows))
    batch.meta_info["temperature"] = 1.0
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in rows], dtype=object)
    return batch


class LocalRewardHandle:
    """verl's real ``RewardLoopWorker`` in this process, on its own event loop as in its Ray
    actor, shaped like the actor handle (``handle.compute_score.remote(data)`` is awaitable)."""

    def __init__(self, config: Any) -> None:
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

        async def make() -> Any:
            return RewardLoopWorker(config)

        self._loop = LoopThread("reward-worker")
        self.worker = self._loop.run(make())
        self.compute_score = self
        self.calls = 0

    def remote(self, data: DataProto) -> Any:
        self.calls += 1
        fut = asyncio.run_coroutine_threadsafe(self.worker.compute_score(data), self._loop._loop)
        return asyncio.wrap_future(fut)


def vllm_endpoints() -> list[str]:
    urls = [u for u in os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", "").split(",") if u]
    if not urls:
        pytest.skip("no vLLM servers (TAILSIEVE_VLLM_ENDPOINTS); scripts/test.sh starts them")
    return urls
