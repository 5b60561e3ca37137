"""TailSieve inside verl 0.9.1, with verl's real classes: ``generate_sequences`` on real
``DataProto`` prompts over several steps (emulated replicas, and the real vLLM CPU servers when
``TAILSIEVE_VLLM_ENDPOINTS`` names them), the trainer's batch assembly with and without
``TailSieveRayPPOTrainer``, validation, and a save/resume in the middle of a run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

import torch
from fit_steps import check_rows, fit_step, make_trainer, uid_groups
from torch.utils.data import SequentialSampler
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.dataset.rl_dataset import collate_fn
from verl_helpers import (
    GROUP_SIZE,
    NUM_GROUPS,
    PROMPT_LEN,
    RESPONSE_LEN,
    LocalRewardHandle,
    dataset_row,
    trainer_batch,
    verl_config,
    vllm_endpoints,
)

from tailsieve.integrations.verl import TailSieveAgentLoopManager, TailSieveRayPPOTrainer
from tailsieve.integrations.verl.dataloader import TailSieveDataLoader


class Ledger:
    """Every prompt drawn from the dataset, and every delivery, by dataset index."""

    def __init__(self) -> None:
        self.drawn: list[int] = []
        self.delivered: list[int] = []
        self.step_of: dict[int, int] = {}  # index -> step it was drawn
        self.carried: int = 0  # deliveries of prompts drawn in an earlier step

    def draw(self, batch_dict: dict[str, Any], step: int) -> None:
        for e in batch_dict["extra_info"]:
            self.drawn.append(int(e["index"]))
            self.step_of[int(e["index"])] = step

    def deliver(self, out: Any, step: int) -> None:
        for uid, idx in uid_groups(out).items():
            assert len(idx) == GROUP_SIZE, f"uid {uid} has {len(idx)} rows"
            rows = [out.non_tensor_batch[k][idx[0]] for k in ("extra_info", "reward_model")]
            extra, rm = rows
            i = int(extra["index"])
            for j in idx:  # every row of the group carries the prompt's own fields
                assert out.non_tensor_batch["extra_info"][j]["tag"] == f"p{i}"
                assert out.non_tensor_batch["reward_model"][j]["ground_truth"] == f"gt-{i}"
                assert out.non_tensor_batch["data_source"][j] == "tailsieve/test"
            assert rm == {"style": "rule", "ground_truth": f"gt-{i}"}
            self.delivered.append(i)
            if self.step_of[i] < step:
                self.carried += 1
            assert self.step_of[i] >= step - 1  # delivered at most one step after drawn


def loader(need: Any, start: int = 0, size: int = 64) -> TailSieveDataLoader:
    data = [dataset_row(i) for i in range(start, start + size)]
    return TailSieveDataLoader(data, collate_fn, SequentialSampler(data), need, NUM_GROUPS)


def make_manager(config: Any) -> TailSieveAgentLoopManager:
    handle = LocalRewardHandle(config)
    return TailSieveAgentLoopManager.create(
        config=config, llm_client=None, reward_loop_worker_handles=[handle]
    )


def check_step(out: Any, manager: TailSieveAgentLoopManager, ledger: Ledger, step: int) -> None:
    assert len(out) == NUM_GROUPS * GROUP_SIZE
    check_rows(out, PROMPT_LEN, RESPONSE_LEN, manager._pad_id)
    ledger.deliver(out, step)
    tok = manager.tokenizer
    for j in range(len(out)):
        i = int(out.non_tensor_batch["extra_info"][j]["index"])
        # the reward (tests/integrations/verl/reward_fn.py) saw this row's own ground truth
        assert float(out.batch["token_level_scores"][j].sum()) == float(i)
        mask = out.batch["attention_mask"][j, :PROMPT_LEN].bool()
        text = tok.decode(out.batch["prompts"][j][mask])
        assert f"question {i}:" in text  # the prompt tokens are this row's prompt
    adv = out.batch["advantages"]
    assert adv.shape == (len(out), RESPONSE_LEN) and bool(torch.isfinite(adv).all())


def run_steps(
    endpoints: list[str], num_steps: int, *overrides: str
) -> tuple[Ledger, TailSieveAgentLoopManager]:
    config = verl_config(endpoints, *overrides)
    manager = make_manager(config)
    trainer = make_trainer(TailSieveRayPPOTrainer, config, manager)
    ledger = Ledger()
    it = iter(loader(manager.num_fresh_needed))
    for step in range(num_steps):
        batch_dict = next(it)
        ledger.draw(batch_dict, step)
        out = fit_step(trainer, batch_dict, step)
        check_step(out, manager, ledger, step)
        ts = {k[10:]: round(v, 3) for k, v in out.meta_info["timing"].items() if k[:10] == "tailsieve/"}
        print(f"step {step}: drew {len(batch_dict['index'])} prompts, {ts}")
    return ledger, manager


def final_check(ledger: Ledger, manager: TailSieveAgentLoopManager) -> None:
    held = [int(r["fields"]["extra_info"]["index"]) for r in manager.state_dict()["rows"]]
    assert not [k for k, c in Counter(ledger.delivered).items() if c > 1], "duplicated"
    assert sorted(ledger.delivered + held) == sorted(ledger.drawn), "lost or invented"


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_generate_sequences_emulated(emulators: list[str], backend: str) -> None:
    """The emulated replicas speak vLLM's /v1/completions and SGLang's /generate."""
    ledger, manager = run_steps(emulators, 4, f"+tailsieve.backend={backend}")
    try:
        assert ledger.carried > 0, "no prompt was carried: the test exercises nothing"
        final_check(ledger, manager)
        assert manager.last_batch is not None and manager.last_batch.metrics.num_groups == 4
    finally:
        manager.close()


@pytest.mark.vllm
def test_generate_sequences_real_vllm() -> None:
    """The real vLLM CPU servers (token ids and log-probs from the engine). With one replica
    there is no tail pool and nothing is carried; scripts/test.sh starts two. One server can
    act as two replicas: TAILSIEVE_VLLM_ENDPOINTS=http://127.0.0.1:P,http://localhost:P."""
    endpoints = vllm_endpoints()
    ledger, manager = run_steps(endpoints, num_steps=3)
    try:
        if len(endpoints) >= 2:
            assert ledger.carried > 0
        final_check(ledger, manager)
    finally:
        manager.close()


def test_batch_assembly_needs_the_subclass(emulators: list[str]) -> None:
    """verl's own ``repeat(n).union(gen_output)`` rejects TailSieve's batch (different rows);
    the subclass accepts it and the reward/advantage path runs on TailSieve's rows."""
    config = verl_config(emulators)
    manager = make_manager(config)
    try:
        need = manager.num_fresh_needed()
        assert need > NUM_GROUPS  # step 0 launches extra groups to find the tail
        batch_dict = collate_fn([dataset_row(i) for i in range(need)])
        plain = make_trainer(RayPPOTrainer, config, manager)
        with pytest.raises(AssertionError):
            fit_step(plain, batch_dict, 0)
        # the failed step delivered its groups and carried the rest: the next step works
        ledger = Ledger()
        trainer = make_trainer(TailSieveRayPPOTrainer, config, manager)
        batch_dict = collate_fn(
            [dataset_row(i) for i in range(100, 100 + manager.num_fresh_needed())]
        )
        ledger.draw(batch_dict, 1)
        for i in range(need):
            ledger.step_of[i] = 0
        out = fit_step(trainer, batch_dict, 1)
        check_step(out, manager, ledger, 1)
        assert ledger.carried > 0  # step 0's cut-off prompts came back first
    finally:
        manager.close()


def test_validation_answers_every_row_in_order(emulators: list[str]) -> None:
    config = verl_config(emulators)
    manager = make_manager(config)
    try:
        test_batch = trainer_batch([dataset_row(i) for i in range(5)]).repeat(2, interleave=True)
        trainer = make_trainer(TailSieveRayPPOTrainer, config, manager)
        trainer._tailsieve_validating = True
        gen = trainer._get_gen_batch(test_batch)
        gen.meta_info = {"validate": True, "global_steps": 0}
        out = manager.generate_sequences(gen)
        assert len(out) == 10
        check_rows(out, PROMPT_LEN, RESPONSE_LEN, manager._pad_id)
        assert list(out.non_tensor_batch["uid"]) == list(test_batch.non_tensor_batch["uid"])
        test_batch.union(out)  # verl's own union holds: same rows, same order
        assert manager.num_carried == 0
    finally:
        manager.close()


class NoWorkers:
    """Stands in for the actor worker group: its model checkpoint is not TailSieve's concern."""

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        pass

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        pass


def checkpointing_trainer(config: Any) -> tuple[TailSieveRayPPOTrainer, Any]:
    manager = make_manager(config)
    trainer = make_trainer(TailSieveRayPPOTrainer, config, manager)
    trainer.actor_rollout_wg, trainer.use_critic, trainer.global_steps = NoWorkers(), False, 0
    trainer.train_dataloader = loader(manager.num_fresh_needed)
    return trainer, manager


def test_save_resume_mid_run(emulators: list[str], tmp_path: Path) -> None:
    """Two steps, verl's real ``_save_checkpoint`` (with TailSieve's file), a new trainer and
    manager resumed by verl's real ``_load_checkpoint``, two more steps: nothing lost or
    repeated, and the dataloader resumes in place."""
    ckpt = [f"trainer.default_local_dir={tmp_path}", "trainer.resume_mode=auto"]
    config = verl_config(emulators, *ckpt)
    ledger = Ledger()
    trainer, manager = checkpointing_trainer(config)
    it = iter(trainer.train_dataloader)
    for step in (1, 2):
        batch_dict = next(it)
        ledger.draw(batch_dict, step)
        check_step(fit_step(trainer, batch_dict, step), manager, ledger, step)
        trainer.global_steps = step
    carried_at_save = manager.num_carried
    trainer._save_checkpoint()
    assert (tmp_path / "global_step_2" / "tailsieve.pt").exists()
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "2"
    manager.close()

    trainer2, manager2 = checkpointing_trainer(config)
    trainer2._load_checkpoint()
    assert trainer2.global_steps == 2
    assert manager2.num_carried == carried_at_save > 0
    it2 = iter(trainer2.train_dataloader)
    try:
        for step in (3, 4):
            batch_dict = next(it2)
            ledger.draw(batch_dict, step)
            check_step(fit_step(trainer2, batch_dict, step), manager2, ledger, step)
        assert ledger.drawn == list(range(len(ledger.drawn)))  # the loader resumed in place
        final_check(ledger, manager2)
    finally:
        manager2.close()


class RegistryHandle:
    """verl's load balancer as its Ray handle is called: ``get_all_servers.remote()``."""

    def __init__(self, servers: list[str]) -> None:
        self.servers = servers
        self.get_all_servers = self

    async def _all(self) -> list[str]:
        return self.servers

    def remote(self) -> Any:
        return self._all()


class ServerClient:
    """An ``LLMServerClient`` as verl builds it (``_load_balancer`` holds the registry)."""

    def __init__(self, servers: list[str]) -> None:
        self._load_balancer = RegistryHandle(servers)


def test_replicas_from_verl_load_balancer(emulators: list[str]) -> None:
    """No tailsieve.endpoints: the replicas are the servers verl registered (host:port ids)."""
    config = verl_config([])
    client = ServerClient([u.removeprefix("http://") for u in emulators])
    manager = TailSieveAgentLoopManager.create(
        config=config, llm_client=client, reward_loop_worker_handles=[LocalRewardHandle(config)]
    )
    try:
        assert manager.endpoints == tuple(sorted(emulators))
        trainer = make_trainer(TailSieveRayPPOTrainer, config, manager)
        ledger = Ledger()
        batch_dict = collate_fn([dataset_row(i) for i in range(manager.num_fresh_needed())])
        ledger.draw(batch_dict, 0)
        check_step(fit_step(trainer, batch_dict, 0), manager, ledger, 0)
    finally:
        manager.close()
