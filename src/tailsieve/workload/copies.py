"""Exact sibling copies in a recorded trace: responses of one group with identical token ids.

Two independently sampled responses of a prompt are practically never token-identical unless the
sampler drew the same random numbers for both (two servers started with the same engine seed
and no per-request seed, the artefact that contaminated the first ``smollm2-math`` recording).
A copy inflates every within-group statistic (prompt share of variance, intraclass correlation,
draft acceptance from siblings), so the recorder counts them and a clean recording has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tailsieve.errors import TraceError
from tailsieve.workload.trace import Trace


@dataclass(frozen=True, slots=True)
class SiblingCopy:
    """One response whose token ids equal an earlier sibling's (lower sample index)."""

    prompt_id: str
    step: int
    sample: int  # the copy
    copy_of: int  # the sibling it repeats (the lowest sample index with these tokens)
    response_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_id": self.prompt_id, "step": self.step, "sample": self.sample,
                "copy_of": self.copy_of, "response_tokens": self.response_tokens}


@dataclass(frozen=True, slots=True)
class SiblingCopies:
    """The exact sibling copies of a trace (groups: its (prompt, step) cells)."""

    num_responses: int
    num_groups: int
    copies: tuple[SiblingCopy, ...]  # in row order of the trace

    def __post_init__(self) -> None:
        if len(self.copies) > self.num_responses:
            raise TraceError(f"{len(self.copies)} copies among {self.num_responses} responses")

    @property
    def num_copies(self) -> int:
        return len(self.copies)

    @property
    def num_groups_with_copies(self) -> int:
        return len({(c.prompt_id, c.step) for c in self.copies})

    def to_dict(self, max_examples: int = 10) -> dict[str, Any]:
        """JSON-safe summary: the counts and the first ``max_examples`` copies."""
        return {"num_copies": self.num_copies, "num_responses": self.num_responses,
                "num_groups_with_copies": self.num_groups_with_copies,
                "num_groups": self.num_groups,
                "examples": [c.to_dict() for c in self.copies[:max_examples]]}


def sibling_copies(trace: Trace) -> SiblingCopies:
    """Every response whose token ids equal those of a sibling with a lower sample index (same
    prompt and step). Raises ``TraceError`` when the trace has no ``token_ids`` column."""
    if trace.token_ids is None:
        raise TraceError(f"{trace.source}: no token_ids column; sibling copies need token ids")
    _, _, cell = trace.cell_index()
    order = np.lexsort((trace.sample, cell))
    seen: dict[tuple[int, tuple[int, ...]], int] = {}
    found: list[tuple[int, int]] = []  # (row, sample copied)
    for row in order.tolist():
        key = (int(cell[row]), tuple(trace.token_ids[row]))
        first = seen.setdefault(key, int(trace.sample[row]))
        if first != int(trace.sample[row]):
            found.append((row, first))
    names = trace.prompt_names
    copies = tuple(
        SiblingCopy(names[int(trace.prompt_codes[r])], int(trace.step[r]), int(trace.sample[r]),
                    first, int(trace.response_tokens[r]))
        for r, first in sorted(found)
    )
    return SiblingCopies(trace.num_rows, int(cell.max()) + 1 if trace.num_rows else 0, copies)
