"""slime's interfaces as the adapter uses them, for tests that run without slime: a ``Sample``
with the fields of ``slime.utils.types.Sample`` the adapter reads or writes, and a data source
with ``RolloutDataSourceWithBuffer``'s behaviour (buffer served first, groups of
``n_samples_per_prompt`` copies with increasing ``group_index``/``index``; ``save`` keeps the
counters but not the buffer). ``tests/integrations/slime/test_slime_real.py`` runs the same
flow against slime's real classes.
"""

from __future__ import annotations

import copy
import json
import os
from argparse import Namespace
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    custom_rm_path: str | None = None


class BufferedSource:
    """``RolloutDataSourceWithBuffer`` semantics over an in-memory prompt list."""

    def __init__(self, args: Namespace) -> None:
        self.args = args
        self.prompts = [
            Sample(prompt=f"q{i} " + "w " * (i % 4), tokens=[5] * (3 + i % 4), label=str(i))
            for i in range(args.num_prompts)
        ]
        self.offset = 0
        self.sample_group_index = 0
        self.sample_index = 0
        self.buffer: list[list[Sample]] = []

    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        out = self.buffer[:num_samples]
        del self.buffer[:num_samples]
        for _ in range(num_samples - len(out)):
            base = self.prompts[self.offset % len(self.prompts)]
            self.offset += 1
            group = []
            for _ in range(self.args.n_samples_per_prompt):
                s = copy.deepcopy(base)
                s.group_index, s.index = self.sample_group_index, self.sample_index
                self.sample_index += 1
                group.append(s)
            self.sample_group_index += 1
            out.append(group)
        return out

    def add_samples(self, samples: list[list[Sample]]) -> None:
        for g in samples:
            assert len(g) == self.args.n_samples_per_prompt
            self.buffer.append(g)

    def save(self, rollout_id: int) -> None:
        path = os.path.join(self.args.save, f"rollout/global_dataset_state_dict_{rollout_id}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump([self.offset, self.sample_group_index, self.sample_index], f)

    def load(self, rollout_id: int | None = None) -> None:
        if self.args.load is None:
            return
        path = os.path.join(self.args.load, f"rollout/global_dataset_state_dict_{rollout_id}.json")
        with open(path) as f:
            self.offset, self.sample_group_index, self.sample_index = json.load(f)

    def __len__(self) -> int:
        return len(self.prompts)


async def label_reward(args: Namespace, sample: Sample) -> float:
    """A ``--custom-rm-path`` reward: the prompt's own label as a number."""
    return float(sample.label or "nan")
