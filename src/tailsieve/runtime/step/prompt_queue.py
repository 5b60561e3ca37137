"""The prompts a live rollout holds between steps (``TailSieveRollout``): the caller's new
prompts, queued and drawn in order, and the carried ones (aborted at a cutoff, kept to be
delivered in a later step); an id is held once."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import PromptInput, PromptLike


class PromptQueue:
    """Queued prompts (``pending``, in order) and the content of carried ones (``carried``,
    by id)."""

    def __init__(self) -> None:
        self.pending: deque[PromptInput] = deque()
        self.carried: dict[str, PromptInput] = {}
        self._seen: set[str] = set()  # ids queued or carried (duplicate guard)

    def add(self, prompts: Iterable[PromptLike]) -> None:
        """Queue ``prompts`` (``PromptInput`` or its dict form); an id already held is a
        ``ConfigError``."""
        for p in prompts:
            pi = p if isinstance(p, PromptInput) else PromptInput.from_dict(p, "prompt")
            if pi.prompt_id in self._seen:
                raise ConfigError(f"prompt id {pi.prompt_id!r} is already queued or carried")
            self._seen.add(pi.prompt_id)
            self.pending.append(pi)

    def draw(self, by_id: dict[str, PromptInput]) -> Iterator[str]:
        """The queued prompts' ids in order, each taken off the queue into ``by_id`` as it is
        drawn."""
        while self.pending:
            p = self.pending.popleft()
            by_id[p.prompt_id] = p
            yield p.prompt_id

    def put_back(self, prompt_ids: Sequence[str], by_id: Mapping[str, PromptInput]) -> None:
        """A failed step's drawn prompts, back in front of the queue in their order."""
        for pid in reversed(prompt_ids):
            self.pending.appendleft(by_id[pid])

    def settle(self, delivered: Iterable[str], carried: Iterable[str],
               by_id: Mapping[str, PromptInput]) -> None:
        """After a step: the ``delivered`` ids are free again; the ``carried`` ones are kept."""
        self._seen.difference_update(delivered)
        self.carried = {pid: by_id[pid] for pid in carried}

    def state_dict(self) -> dict[str, Any]:
        """The queued and carried prompts (``PromptInput.to_dict``: content and seed); JSON-safe."""
        return {"pending": [p.to_dict() for p in self.pending],
                "carried": [p.to_dict() for p in self.carried.values()]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict``."""
        self.pending = deque(PromptInput.from_dict(d, "state") for d in state["pending"])
        self.carried = {
            p.prompt_id: p for p in (PromptInput.from_dict(d, "state") for d in state["carried"])
        }
        self._seen = {p.prompt_id for p in self.pending} | set(self.carried)

