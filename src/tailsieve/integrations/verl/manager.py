"""``TailSieveAgentLoopManager``: verl's rollout manager, replaced by a TailSieve step.

Selected with ``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=
tailsieve.integrations.verl.TailSieveAgentLoopManager``; verl builds it with
``AgentLoopManager.create(config=..., llm_client=..., teacher_client=...,
reward_loop_worker_handles=...)`` and calls ``generate_sequences(DataProto)`` once per step.

A training call groups the rows by ``uid`` (one prompt, ``rollout.n`` rows), hands the prompts to
``TailSieveRollout.step`` against the replicas' HTTP endpoints and returns exactly
``num_groups x n`` rows: carried prompts from the previous step first (with their own
``data_source``/``reward_model``/``extra_info``), then fresh ones; fresh prompts cut off this
step are carried to the next. Rewards go through verl's reward-loop workers when verl passes
them, as verl's own agent loop does. A validation call (``meta_info["validate"]``) answers every
row in input order (uniform routing, no carry).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.utils.ray_utils import auto_await

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.integrations.loop_thread import LoopThread
from tailsieve.integrations.verl.batch import (
    PromptRow,
    build_output,
    group_rows,
    place_scores,
    reward_request,
    row_fields,
)
from tailsieve.integrations.verl.settings import VerlSettings
from tailsieve.integrations.verl.trainer import WholeOnFirstSlice
from tailsieve.runtime.engine.backends import Backend, PromptInput
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_batch import RolloutBatch

logger = logging.getLogger(__name__)
STATE_VERSION = 1


class TailSieveAgentLoopManager(AgentLoopManager):
    """A drop-in ``AgentLoopManager`` whose ``generate_sequences`` runs one TailSieve step."""

    def __init__(
        self,
        config: Any,
        llm_client: Any = None,
        teacher_client: Any = None,
        reward_loop_worker_handles: list[Any] | None = None,
    ) -> None:
        self.agent_loop_workers_class = None  # no verl agent-loop workers: TailSieve talks HTTP
        super().__init__(config, llm_client, teacher_client, reward_loop_worker_handles)
        if teacher_client is not None:
            raise ConfigError("TailSieve does not support on-policy distillation (teacher_client)")
        self.settings = VerlSettings.from_verl(config)
        self.endpoints: tuple[str, ...] = ()
        self.last_batch: RolloutBatch | None = None  # the last training step (metrics, timeline)
        self._loop = LoopThread("tailsieve-verl")
        self._rows: dict[str, PromptRow] = {}  # queued or carried prompts, by uid
        self._ro: TailSieveRollout | None = None
        self._saved_rollout: dict[str, Any] | None = None  # loaded before the rollout exists
        self._model: str | None = None
        self._builder: Any = None
        self.tokenizer: Any = None  # verl's hf_tokenizer of actor_rollout_ref.model
        self._pad_id = 0

    # ----- set-up ----------------------------------------------------------------------
    async def _init_agent_loop_workers(self) -> None:
        """Called by ``create``: tokenizer, prompt builder and the replicas' URLs."""
        self.agent_loop_workers: list[Any] = []
        self._init_tokenizer()
        self.endpoints = self.settings.endpoints or await self._verl_endpoints()
        logger.info("TailSieve: %d replicas %s", len(self.endpoints), list(self.endpoints))

    def _init_tokenizer(self) -> None:
        from transformers import AutoConfig
        from verl.utils.tokenizer import hf_tokenizer
        from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

        model = self.config.actor_rollout_ref.model
        path = model.get("tokenizer_path") or model.path
        tokenizer = hf_tokenizer(path, trust_remote_code=bool(model.get("trust_remote_code")))
        self.tokenizer = tokenizer
        model_type = getattr(AutoConfig.from_pretrained(model.path), "model_type", None)
        kwargs = dict(self.config.data.get("apply_chat_template_kwargs") or {})
        self._builder = create_continuous_token_builder(
            tokenizer, hf_model_type=model_type, chat_template_kwargs=kwargs
        )
        self._pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)

    async def _verl_endpoints(self) -> tuple[str, ...]:
        """The servers verl launched, from its load balancer's registry (``host:port`` ids)."""
        lb = getattr(self.llm_client, "_load_balancer", None)
        if lb is None:
            raise ConfigError(
                "tailsieve.endpoints is empty and verl passed no llm_client with a load "
                "balancer: list the replicas' URLs in tailsieve.endpoints"
            )
        servers = await lb.get_all_servers.remote()
        if not servers:
            raise ReplicaError("verl's load balancer lists no rollout servers")
        return tuple(s if s.startswith("http") else f"http://{s}" for s in sorted(servers))

    async def _served_model(self) -> str:
        if self.settings.model:
            return self.settings.model
        if self.settings.backend is Backend.SGLANG:
            return "default"  # SGLang's /generate takes no model name
        runner = HttpPieceRunner(self.endpoints, self.settings.backend)
        try:
            card = await runner.models.card(0)  # verl's servers serve one policy: the first id
        finally:
            await runner.aclose()
        if card is None:
            raise ReplicaError(f"{self.endpoints[0]} lists no model at /v1/models: set "
                               "tailsieve.model")
        return card.name

    async def _rollout(self) -> TailSieveRollout:
        if self._ro is None:
            if self._model is None:
                self._model = await self._served_model()
            ro = TailSieveRollout(self.endpoints, self.settings.rollout_config(self._model))
            await ro.__aenter__()
            if self._saved_rollout is not None:
                ro.load_state_dict(self._saved_rollout)
                self._saved_rollout = None
            self._ro = ro
        return self._ro

    # ----- the trainer's interface -----------------------------------------------------
    def num_fresh_needed(self) -> int:
        """New prompts the next training call needs (the dataloader's next batch size)."""
        return self._loop.run(self._rollout()).num_fresh_needed()

    @property
    def num_carried(self) -> int:
        """Prompts cut off last step, delivered first in the next one."""
        if self._ro is not None:
            return self._ro.num_carried
        return len(self._saved_rollout["carried"]) if self._saved_rollout else 0

    @auto_await
    async def generate_sequences(self, prompts: DataProto) -> DataProto:
        """One training step (or a validation pass) as verl's rows; see the module docstring."""
        if prompts.meta_info.get("validate", False):
            return await self._loop.run_async(self._validate(prompts))
        return await self._loop.run_async(self._train_step(prompts))

    def state_dict(self) -> dict[str, Any]:
        """TailSieve's rollout state plus the verl fields of every queued or carried prompt."""
        rollout = self._ro.state_dict() if self._ro is not None else self._saved_rollout
        return {
            "version": STATE_VERSION,
            "rollout": rollout,
            "rows": [r.to_state() for r in self._rows.values()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ConfigError(f"TailSieve verl state version {state.get('version')!r} unknown")
        rows = {r.uid: r for r in (PromptRow.from_state(d) for d in state["rows"])}
        if state["rollout"] is not None:
            held = {d["prompt_id"] for d in state["rollout"]["pending"]}
            held |= {d["prompt_id"] for d in state["rollout"]["carried"]}
            if held != set(rows):
                raise ConfigError("TailSieve verl state: rollout prompts and rows disagree")
        self._rows = rows
        if self._ro is not None and state["rollout"] is not None:
            self._ro.load_state_dict(state["rollout"])
        else:
            self._saved_rollout = state["rollout"]

    def close(self) -> None:
        """Close the HTTP sessions and stop the private event loop."""
        if self._ro is not None:
            self._loop.run(self._ro.aclose())
            self._ro = None
        self._loop.close()

    # ----- steps -----------------------------------------------------------------------
    def _prompt_row(self, uid: str, fields: dict[str, Any]) -> PromptRow:
        agent = fields.get("agent_name")
        if agent not in (None, "single_turn_agent"):
            raise ConfigError(f"row {uid!r}: agent loop {agent!r}; TailSieve runs single-turn rollouts")
        if "__do_sample__" in fields:
            raise ConfigError("TailSieve does not support REMAX (greedy baseline rollouts)")
        if "raw_prompt" not in fields:
            raise ConfigError(f"row {uid!r} has no 'raw_prompt' (verl's RLHFDataset adds it)")
        ids = list(self._builder.build_initial_tokens(list(fields["raw_prompt"])))
        cap = self.settings.prompt_length
        if len(ids) > cap:  # as verl's agent loop does for text prompts
            logger.warning(
                "prompt of %d tokens > rollout.prompt_length=%d: left-truncating", len(ids), cap
            )
            ids = ids[-cap:]
        return PromptRow(uid, tuple(int(t) for t in ids), fields)

    async def _train_step(self, prompts: DataProto) -> DataProto:
        ro = await self._rollout()
        n = self.settings.group_size
        fresh: list[PromptRow] = []
        for uid, idx in group_rows(prompts):
            if len(idx) != n:
                raise ConfigError(f"uid {uid!r} has {len(idx)} rows, expected rollout.n = {n}")
            if uid in self._rows:
                raise ConfigError(f"uid {uid!r} is already queued or carried by TailSieve")
            fresh.append(self._prompt_row(uid, row_fields(prompts, idx[0])))
        need = ro.num_fresh_needed()
        if len(fresh) < need:
            raise ConfigError(
                f"TailSieve needs {need} new prompts this step, got {len(fresh)}: the trainer's "
                "dataloader must follow num_fresh_needed() (use TailSieveRayPPOTrainer)"
            )
        for r in fresh:
            self._rows[r.uid] = r
        batch = await ro.step(PromptInput(r.uid, token_ids=r.prompt_ids) for r in fresh)
        out = self._output(batch.groups, self._rows)
        for g in batch.groups:
            del self._rows[g.prompt_id]
        await self._score(out)
        out.meta_info["timing"] = batch.metrics.logged()
        self.last_batch = batch
        out.__class__ = WholeOnFirstSlice
        return out

    async def _validate(self, prompts: DataProto) -> DataProto:
        """Every row answered once, in input order (each row its own group of one)."""
        rows: dict[str, PromptRow] = {}
        for i in range(len(prompts)):
            rid = f"val-{i}-{uuid.uuid4().hex[:8]}"
            rows[rid] = self._prompt_row(rid, row_fields(prompts, i))
        val = self.config.actor_rollout_ref.rollout.val_kwargs
        temperature = float(val.temperature) if val.get("do_sample", True) else 0.0
        if self._model is None:
            self._model = await self._served_model()
        cfg = self.settings.rollout_config(
            self._model,
            num_groups=len(rows),
            group_size=1,
            policy="uniform",
            sampling=self.settings.sampling(temperature=temperature),
        )
        async with TailSieveRollout(self.endpoints, cfg) as ro:
            batch = await ro.step(PromptInput(r.uid, token_ids=r.prompt_ids) for r in rows.values())
        by_id = {g.prompt_id: g for g in batch.groups}
        out = self._output([by_id[rid] for rid in rows], rows)
        await self._score(out)
        return out

    def _output(self, groups: Sequence[Any], rows: dict[str, PromptRow]) -> DataProto:
        s = self.settings
        return build_output(groups, rows, s.prompt_length, s.response_length, self._pad_id)

    async def _score(self, out: DataProto) -> None:
        """Rewards through verl's reward-loop workers (when verl gave them), one row each."""
        handles = self.reward_loop_worker_handles
        if not handles:
            return  # verl computes rewards itself (colocated reward model)
        calls = [
            handles[i % len(handles)].compute_score.remote(reward_request(out, i))
            for i in range(len(out))
        ]
        done = await asyncio.gather(*calls)
        place_scores(
            out,
            [float(d["reward_score"]) for d in done],
            [dict(d.get("reward_extra_info") or {}) for d in done],
        )
