"""The part of ``RayPPOTrainer.fit`` (verl 0.9.1) from the dataloader batch to the advantages,
with verl's real ``DataProto``, trainer ``_get_gen_batch``, ``repeat``/``union``,
``compute_response_mask``, ``extract_reward`` and ``compute_advantage``; the line order is
``fit``'s. What is left out needs Ray worker groups: log-prob recomputation, balancing, the
optimizer. Also the invariant checks shared by the tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.ray_trainer import (
    RayPPOTrainer,
    compute_advantage,
    compute_response_mask,
)
from verl.trainer.ppo.reward import extract_reward


def make_trainer(cls: type[RayPPOTrainer], config: Any, manager: Any) -> RayPPOTrainer:
    """A trainer object for the driver-side methods (no Ray workers are created)."""
    trainer = cls.__new__(cls)
    trainer.config = config
    trainer.async_rollout_manager = manager
    return trainer


def fit_step(trainer: RayPPOTrainer, batch_dict: dict[str, Any], step: int) -> DataProto:
    """``fit``'s lines for one step, returning the batch as it reaches the optimizer."""
    import uuid

    cfg = trainer.config
    batch: DataProto = DataProto.from_single_dict(batch_dict)
    batch.meta_info["temperature"] = cfg.actor_rollout_ref.rollout.temperature
    batch.non_tensor_batch["uid"] = np.array(
        [str(uuid.uuid4()) for _ in range(len(batch.batch))], dtype=object
    )
    gen_batch = trainer._get_gen_batch(batch)
    gen_batch.meta_info["global_steps"] = step
    rollout_n = cfg.actor_rollout_ref.rollout.n
    gen_batch_output = gen_batch.repeat(repeat_times=rollout_n, interleave=True)
    combined_gen_batch = gen_batch_output
    num_sampled_prompts = len(gen_batch_output)
    combined_gen_output = trainer.async_rollout_manager.generate_sequences(combined_gen_batch)
    timing_raw: dict[str, float] = {}
    timing_raw.update(combined_gen_output.meta_info["timing"])
    combined_gen_output.meta_info.pop("timing", None)
    gen_batch_output = combined_gen_output.slice(0, num_sampled_prompts)
    batch = batch.repeat(repeat_times=rollout_n, interleave=True)
    batch = batch.union(gen_batch_output)
    if "response_mask" not in batch.batch.keys():  # noqa: SIM118 (fit's own line)
        batch.batch["response_mask"] = compute_response_mask(batch)
    batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
    images_seqlens_all = []
    for multi_modal_input in batch.non_tensor_batch["multi_modal_inputs"]:
        if "image_grid_thw" not in multi_modal_input.keys():  # noqa: SIM118 (fit's line)
            continue
        images_seqlens_all.extend(multi_modal_input["images_seqlens"].tolist())
    batch.meta_info["images_seqlens"] = images_seqlens_all
    reward_tensor, reward_extra_infos_dict = extract_reward(batch)
    batch.batch["token_level_scores"] = reward_tensor
    if reward_extra_infos_dict:
        batch.non_tensor_batch.update({k: np.array(v) for k, v in reward_extra_infos_dict.items()})
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    batch = compute_advantage(
        batch,
        adv_estimator=cfg.algorithm.adv_estimator,
        gamma=cfg.algorithm.gamma,
        lam=cfg.algorithm.lam,
        num_repeat=rollout_n,
        norm_adv_by_std_in_grpo=cfg.algorithm.get("norm_adv_by_std_in_grpo", True),
        config=cfg.algorithm,
    )
    batch.meta_info["timing"] = timing_raw
    return batch


def check_rows(out: DataProto, prompt_len: int, response_len: int, pad_id: int) -> None:
    """Every row well-formed: shapes, left-padded prompts, right-padded responses, masks that
    match the token counts, positions from the mask, log-probs on every response token."""
    t = out.batch
    b = len(out)
    assert t["prompts"].shape == (b, prompt_len)
    assert t["responses"].shape == (b, response_len)
    for key in ("input_ids", "attention_mask", "position_ids"):
        assert t[key].shape == (b, prompt_len + response_len), key
    assert t["response_mask"].shape == t["rollout_log_probs"].shape == (b, response_len)
    pmask = t["attention_mask"][:, :prompt_len]
    rmask = t["attention_mask"][:, prompt_len:]
    assert torch.equal(rmask, t["response_mask"])
    assert torch.equal(t["input_ids"], torch.cat([t["prompts"], t["responses"]], dim=1))
    pos = torch.clip(torch.cumsum(t["attention_mask"], dim=-1) - 1, min=0)
    assert torch.equal(t["position_ids"], pos)
    for i in range(b):
        p, r = pmask[i], rmask[i]
        np_, nr = int(p.sum()), int(r.sum())
        assert np_ >= 1 and nr >= 1
        assert torch.equal(p, torch.cat([torch.zeros(prompt_len - np_), torch.ones(np_)]).long())
        assert torch.equal(r, torch.cat([torch.ones(nr), torch.zeros(response_len - nr)]).long())
        assert bool((t["prompts"][i][: prompt_len - np_] == pad_id).all())
        assert bool((t["responses"][i][nr:] == pad_id).all())
        lp = t["rollout_log_probs"][i]
        assert bool(torch.isfinite(lp[:nr]).all()) and bool((lp[:nr] <= 0).all())
        assert bool((lp[nr:] == 0).all())
        assert bool((lp[:nr] != 0).any()) or nr == 0


def uid_groups(out: DataProto) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, uid in enumerate(out.non_tensor_batch["uid"]):
        groups.setdefault(str(uid), []).append(i)
    return groups
