"""The TailSieve state a slime run keeps between rollout steps (owned by the data source).

It holds the live ``TailSieveRollout`` (on its own event loop: slime calls the rollout function
synchronously) and, for every prompt TailSieve has queued or carried, its pristine sample group
and prompt token ids. ``state_dict`` is what ``TailSieveDataSource.save`` writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.integrations.loop_thread import LoopThread
from tailsieve.integrations.slime.samples import restart
from tailsieve.integrations.slime.settings import SlimeSettings
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_batch import RolloutBatch

STATE_VERSION = 1


@dataclass(slots=True)
class HeldGroup:
    """A prompt TailSieve holds: its slime samples (pristine) and prompt token ids."""

    samples: list[Any]
    prompt_ids: tuple[int, ...]


class TailSieveSlimSession:
    """TailSieve's side of a slime run; created by ``TailSieveDataSource``."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.settings = SlimeSettings.from_args(args)
        self.held: dict[str, HeldGroup] = {}
        self._loop: LoopThread | None = None
        self._ro: TailSieveRollout | None = None
        self._saved: dict[str, Any] | None = None
        self._tokenizer: Any = None

    # ----- rollout --------------------------------------------------------------------
    def run(self, coro: Any) -> Any:
        if self._loop is None:
            self._loop = LoopThread("tailsieve-slime")
        return self._loop.run(coro)

    async def rollout(self) -> TailSieveRollout:
        if self._ro is None:
            endpoints = self.settings.endpoints or await self._router_workers()
            ro = TailSieveRollout(endpoints, self.settings.rollout_config())
            await ro.__aenter__()
            if self._saved is not None:
                ro.load_state_dict(self._saved)
                self._saved = None
            self._ro = ro
        return self._ro

    async def _router_workers(self) -> tuple[str, ...]:
        """The SGLang workers behind slime's router (``GET /workers``, as slime's abort does)."""
        url = f"{self.settings.router_url}/workers"
        try:
            async with aiohttp.ClientSession() as s, s.get(url) as r:
                workers = (await r.json())["workers"]
        except (aiohttp.ClientError, KeyError, ValueError) as exc:
            raise ReplicaError(f"cannot list the SGLang workers at {url}: {exc!r}") from exc
        urls = tuple(str(w["url"]).rstrip("/") for w in workers)
        if not urls:
            raise ReplicaError(f"{url} lists no workers")
        return urls

    def num_fresh_needed(self) -> int:
        return int(self.run(self.rollout()).num_fresh_needed())

    @property
    def num_carried(self) -> int:
        if self._ro is not None:
            return self._ro.num_carried
        return len(self._saved["carried"]) if self._saved else 0

    def add(self, groups: Sequence[list[Any]]) -> list[PromptInput]:
        """Hold new groups (restarted from scratch) and return their prompts for ``step``."""
        prompts = []
        for group in groups:
            if len(group) != self.settings.group_size:
                raise ConfigError(
                    f"a group of {len(group)} samples; --n-samples-per-prompt is "
                    f"{self.settings.group_size}"
                )
            for s in group:
                restart(s)
            gi = getattr(group[0], "group_index", None)
            pid = f"g{gi}" if gi is not None else f"u{uuid.uuid4().hex}"
            if pid in self.held:
                raise ConfigError(f"group {pid!r} is already held by TailSieve")
            ids = self._prompt_ids(group[0])
            for s in group:
                s.tokens = list(ids)
            self.held[pid] = HeldGroup(list(group), ids)
            prompts.append(PromptInput(pid, token_ids=ids))
        return prompts

    def step(self, prompts: Sequence[PromptInput]) -> RolloutBatch:
        async def go() -> RolloutBatch:
            ro = await self.rollout()
            return await ro.step(prompts)

        return self.run(go())

    def _prompt_ids(self, sample: Any) -> tuple[int, ...]:
        if sample.tokens:
            return tuple(int(t) for t in sample.tokens)
        if not isinstance(sample.prompt, str):
            raise ConfigError(
                "a sample without tokens needs a string prompt (--apply-chat-template)"
            )
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(
                self.args.hf_checkpoint, trust_remote_code=True
            )
        return tuple(self._tokenizer.encode(sample.prompt, add_special_tokens=False))

    # ----- state ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Picklable: the rollout's state and the held groups (slime ``Sample`` objects)."""
        rollout = self._ro.state_dict() if self._ro is not None else self._saved
        return {
            "version": STATE_VERSION,
            "rollout": rollout,
            "held": {pid: (h.samples, list(h.prompt_ids)) for pid, h in self.held.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ConfigError(f"TailSieve slime state version {state.get('version')!r} unknown")
        self.held = {
            pid: HeldGroup(list(samples), tuple(ids))
            for pid, (samples, ids) in state["held"].items()
        }
        if self._ro is not None and state["rollout"] is not None:
            self._ro.load_state_dict(state["rollout"])
        else:
            self._saved = state["rollout"]

    def close(self) -> None:
        if self._ro is not None:
            self.run(self._ro.aclose())
            self._ro = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None
