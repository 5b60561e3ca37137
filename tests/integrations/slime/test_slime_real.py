"""The slime adapter through slime's real code: ``call_rollout_fn``, ``Sample``,
``RolloutDataSourceWithBuffer`` (with its real ``Dataset`` over a JSONL prompt file and the tiny
model's tokenizer), ``rm_hub.async_rm`` and ``validate_rollout_id_annotated``, against emulated
SGLang workers. slime is not on PyPI, so this runs only where its source is importable::

    git --git-dir=<slime mirror> archive HEAD slime | tar -x -C /tmp/slime-src
    PYTHONPATH=/tmp/slime-src .venv-verl/bin/python -m pytest tests/integrations/slime

(``.venv-verl`` has torch, transformers and ray, which slime imports; nothing is stubbed.)
"""

from __future__ import annotations

import json
import os
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("slime.rollout.data_source", reason="slime's source is not importable")

from slime.observability.rollout_data_utils import validate_rollout_id_annotated
from slime.rollout.base_types import RolloutFnTrainOutput, call_rollout_fn
from slime.rollout.data_source import RolloutDataSourceWithBuffer
from slime.utils.types import Sample

from tailsieve.integrations.slime import TailSieveDataSource, generate_rollout

N, n = 4, 2
ROOT = Path(__file__).resolve().parents[3]


def tiny_model() -> str:
    for cand in (
        os.environ.get("TAILSIEVE_TINY_MODEL_DIR"),
        str(ROOT / ".cache/tiny-qwen2"),
        "/work/main/.cache/tiny-qwen2",
    ):
        if cand and (Path(cand) / "config.json").exists():
            return cand
    pytest.skip("no tiny model")


def slime_args(workers: list[str], tmp: Path, **kw: Any) -> Namespace:
    data = tmp / "prompts.jsonl"
    if not data.exists():
        with open(data, "w") as f:
            for i in range(40):
                f.write(json.dumps({"prompt": f"question {i}: " + "w " * (i % 5), "label": str(i)}))
                f.write("\n")
    args = Namespace(
        # slime's data-source flags
        rollout_global_dataset=True,
        prompt_data=str(data),
        hf_checkpoint=tiny_model(),
        dump_details=None,
        rollout_max_prompt_len=None,
        input_key="prompt",
        multimodal_keys=None,
        label_key="label",
        metadata_key="metadata",
        tool_key=None,
        apply_chat_template=False,
        apply_chat_template_kwargs={},
        rollout_seed=42,
        rollout_shuffle=False,
        buffer_filter_path=None,
        save=str(tmp / "ckpt"),
        load=None,
        # slime's rollout flags
        rollout_batch_size=N,
        n_samples_per_prompt=n,
        rollout_max_response_len=48,
        rollout_temperature=1.0,
        rollout_top_p=1.0,
        rollout_top_k=-1,
        rollout_stop=None,
        custom_rm_path="slime_like.label_reward",
        group_rm=False,
        rm_type=None,
        # TailSieve (from --custom-config-path in a real run)
        tailsieve_endpoints=list(workers),
        tailsieve_profile="cpu",
    )
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def rollout(args: Namespace, rollout_id: int, ds: TailSieveDataSource) -> list[list[Sample]]:
    """``RolloutManager._get_rollout_data``'s calls: call_rollout_fn, then the id check."""
    out = call_rollout_fn(generate_rollout, args, rollout_id, ds, evaluation=False)
    assert isinstance(out, RolloutFnTrainOutput) and out.metrics["tailsieve/q"] >= 0
    validate_rollout_id_annotated(out.samples)
    assert len(out.samples) == args.rollout_batch_size  # group-wise reward normalisation needs it
    for g in out.samples:
        assert len(g) == args.n_samples_per_prompt and len({s.group_index for s in g}) == 1
        for s in g:
            assert isinstance(s, Sample) and s.response_length >= 1
            assert len(s.rollout_log_probs) == s.response_length == len(s.loss_mask)
            assert s.reward == float(s.label)  # slime's async_rm with the prompt's own label
            assert s.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
    return out.samples


def test_real_slime_steps_and_resume(sglang_workers: list[str], tmp_path: Path) -> None:
    args = slime_args(sglang_workers, tmp_path)
    ds = TailSieveDataSource(args)  # wraps slime's RolloutDataSourceWithBuffer(args)
    assert isinstance(ds.base, RolloutDataSourceWithBuffer)
    delivered: list[int] = []
    step0 = rollout(args, 0, ds)
    delivered += [g[0].group_index for g in step0]
    carried = set(ds.tailsieve.held)
    assert carried
    step1 = rollout(args, 1, ds)
    delivered += [g[0].group_index for g in step1]
    assert carried <= {f"g{g[0].group_index}" for g in step1}
    for g in step1:  # carried ones regenerated from scratch: prompt ids + one fresh response
        for s in g:
            prompt_ids = ds.tailsieve._tokenizer.encode(s.prompt, add_special_tokens=False)
            assert s.tokens == prompt_ids + s.tokens[len(prompt_ids) :]
            assert len(s.tokens) == len(prompt_ids) + s.response_length
    # slime's partial-rollout buffer holds an aborted, half-generated group
    partial = ds.get_samples(1)
    for s in partial[0]:
        s.tokens = [*ds.tailsieve._tokenizer.encode(s.prompt, add_special_tokens=False), 9, 9]
        s.response, s.response_length, s.rollout_log_probs = "ab", 2, [-1.0, -1.0]
        s.status = Sample.Status.ABORTED
    ds.add_samples(partial)
    ds.save(1)
    held = set(ds.tailsieve.held)
    ds.tailsieve.close()

    args2 = slime_args(sglang_workers, tmp_path, load=str(tmp_path / "ckpt"))
    ds2 = TailSieveDataSource(args2)
    ds2.load(1)
    assert set(ds2.tailsieve.held) == held and len(ds2.base.buffer) == 1
    try:
        for rid in (2, 3):
            delivered += [g[0].group_index for g in rollout(args2, rid, ds2)]
        left = {int(p[1:]) for p in ds2.tailsieve.held}
        assert len(delivered) == len(set(delivered))  # none twice
        drawn = ds2.base.sample_group_index  # slime's own counter of groups drawn
        assert sorted([*delivered, *left]) == list(range(drawn))  # none lost
        assert partial[0][0].group_index in delivered
    finally:
        ds2.tailsieve.close()
