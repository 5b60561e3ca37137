"""Between verl's ``DataProto`` and TailSieve's prompts and groups.

Input: the rows ``generate_sequences`` receives (each prompt repeated ``n`` times, interleaved,
one ``uid`` per prompt). Output: one row per response, laid out exactly like verl's own agent
loop output (``AgentLoopWorker._postprocess``): ``prompts`` left-padded to ``prompt_length``,
``responses`` right-padded to ``response_length``, ``input_ids = prompts ++ responses``,
``attention_mask``, ``response_mask``, ``position_ids`` from the mask, ``rollout_log_probs``
(zeros on padding), plus each row's own non-tensor fields (``uid``, ``data_source``,
``reward_model``, ``extra_info``, ...).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.utils.model import compute_position_id_with_mask

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.runtime.step.step_state import GroupResponses

NUM_TURNS = 2  # a single-turn rollout (user + assistant), as verl's single_turn_agent reports


@dataclass(frozen=True, slots=True)
class PromptRow:
    """One prompt as TailSieve holds it until delivered: its token ids and verl fields."""

    uid: str
    prompt_ids: tuple[int, ...]  # chat-templated prompt token ids
    fields: dict[str, Any]  # the row's non-tensor values (data_source, reward_model, ...)

    def to_state(self) -> dict[str, Any]:
        return {"uid": self.uid, "prompt_ids": list(self.prompt_ids), "fields": self.fields}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> PromptRow:
        return cls(str(d["uid"]), tuple(int(t) for t in d["prompt_ids"]), dict(d["fields"]))


def group_rows(data: DataProto) -> list[tuple[str, list[int]]]:
    """``(uid, row indices)`` per prompt, in first-appearance order."""
    if "uid" not in data.non_tensor_batch:
        raise ConfigError("generate_sequences: the batch has no 'uid' (verl adds it in fit)")
    order: dict[str, list[int]] = {}
    for i, uid in enumerate(data.non_tensor_batch["uid"]):
        order.setdefault(str(uid), []).append(i)
    return list(order.items())


def row_fields(data: DataProto, i: int) -> dict[str, Any]:
    """The non-tensor values of row ``i`` (deep-copied: TailSieve may hold them for a step)."""
    return {k: copy.deepcopy(v[i]) for k, v in data.non_tensor_batch.items()}


def build_output(
    groups: Sequence[GroupResponses],
    rows: dict[str, PromptRow],
    prompt_length: int,
    response_length: int,
    pad_token_id: int,
) -> DataProto:
    """One row per response of ``groups`` (group order, sample order), in verl's layout."""
    flat = [(g, r) for g in groups for r in g.responses]
    bsz = len(flat)
    prompts = torch.full((bsz, prompt_length), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((bsz, prompt_length), dtype=torch.long)
    responses = torch.full((bsz, response_length), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((bsz, response_length), dtype=torch.long)
    logprobs = torch.zeros((bsz, response_length), dtype=torch.float32)
    for i, (g, r) in enumerate(flat):
        p = rows[g.prompt_id].prompt_ids
        if len(p) > prompt_length:
            raise ConfigError(
                f"prompt {g.prompt_id!r} has {len(p)} tokens > rollout.prompt_length "
                f"{prompt_length}; raise prompt_length or filter long prompts"
            )
        if r.token_ids is None or r.logprobs is None:
            raise ReplicaError(f"prompt {g.prompt_id!r}: the server returned no token ids/logprobs")
        if len(r.token_ids) > response_length or len(r.logprobs) != len(r.token_ids):
            raise ReplicaError(
                f"prompt {g.prompt_id!r}: {len(r.token_ids)} response tokens, "
                f"{len(r.logprobs)} logprobs (cap {response_length})"
            )
        k = len(r.token_ids)
        if p:
            prompts[i, prompt_length - len(p) :] = torch.tensor(p, dtype=torch.long)
            prompt_mask[i, prompt_length - len(p) :] = 1
        if k:
            responses[i, :k] = torch.tensor(r.token_ids, dtype=torch.long)
            response_mask[i, :k] = 1
            logprobs[i, :k] = torch.tensor(r.logprobs, dtype=torch.float32)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    batch = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
            "rollout_log_probs": logprobs,
        },
        batch_size=bsz,
    )
    keys: dict[str, None] = {}
    for g, _ in flat:
        keys.update(dict.fromkeys(rows[g.prompt_id].fields))
    non_tensor: dict[str, np.ndarray] = {}
    for key in keys:
        arr = np.empty(bsz, dtype=object)
        arr[:] = [copy.deepcopy(rows[g.prompt_id].fields.get(key)) for g, _ in flat]
        non_tensor[key] = arr
    uid = np.empty(bsz, dtype=object)
    uid[:] = [rows[g.prompt_id].fields.get("uid", g.prompt_id) for g, _ in flat]
    non_tensor["uid"] = uid
    non_tensor["__num_turns__"] = np.full(bsz, NUM_TURNS, dtype=np.int32)
    mm = np.empty(bsz, dtype=object)
    mm[:] = [{} for _ in flat]
    non_tensor["multi_modal_inputs"] = mm
    return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info={})


def reward_request(data: DataProto, i: int) -> DataProto:
    """Row ``i`` unpadded, as verl's agent loop sends it to a reward-loop worker."""
    t = data.batch
    pmask = t["attention_mask"][i, : t["prompts"].shape[1]].bool()
    rmask = t["response_mask"][i].bool()
    prompt, resp = t["prompts"][i][pmask], t["responses"][i][rmask]
    ids = torch.cat([prompt, resp])
    mask = torch.ones_like(ids)
    batch = TensorDict(
        {
            "prompts": prompt.unsqueeze(0),
            "responses": resp.unsqueeze(0),
            "attention_mask": mask.unsqueeze(0),
            "input_ids": ids.unsqueeze(0),
            "position_ids": compute_position_id_with_mask(mask).unsqueeze(0),
        },
        batch_size=1,
    )
    skip = ("multi_modal_inputs",)
    nt = {k: _one(copy.deepcopy(v[i])) for k, v in data.non_tensor_batch.items() if k not in skip}
    nt["tool_extra_fields"] = _one({})
    nt["prompt_len"] = np.array([len(prompt)])
    nt["response_len"] = np.array([len(resp)])
    return DataProto(batch=batch, non_tensor_batch=nt)


def place_scores(data: DataProto, scores: Sequence[float], extra: Sequence[dict[str, Any]]) -> None:
    """``rm_scores`` (the score on each row's last response token) and reward extra fields."""
    mask = data.batch["response_mask"]
    rm = torch.zeros_like(mask, dtype=torch.float32)
    last = (mask.sum(dim=1) - 1).clamp(min=0)
    rm[torch.arange(mask.shape[0]), last] = torch.tensor(list(scores), dtype=torch.float32)
    data.batch["rm_scores"] = rm
    keys = list(extra[0].keys()) if extra else []
    for key in keys:
        data.non_tensor_batch[key] = np.array([e.get(key) for e in extra])
    data.meta_info["reward_extra_keys"] = keys


def _one(value: Any) -> np.ndarray:
    arr = np.empty(1, dtype=object)
    arr[0] = value
    return arr
