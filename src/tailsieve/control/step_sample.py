"""What the controller remembers of a step (``StepWork``) and its pre-processed form for fast
predictions (``StepSample``): delivered response lengths, the tail groups first, and the groups
the cutoff aborted as it saw them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# length standing in for a response still running at the cutoff (never completes before it)
RUNNING_TOKENS = 1e9


@dataclass(frozen=True, slots=True)
class StepWork:
    """Response-work record of one step, as the controller remembers it."""

    groups: list[list[int]]  # delivered groups' response lengths, tail groups first
    num_tail: int  # how many leading groups ran in the tail pool (in candidate rank order)
    prompt_tokens: list[int] | None = None  # per delivered group, prompt tokens of each response
    aborted: list[tuple[int, int]] = field(default_factory=list)  # per aborted group:
    # (responses finished before the cutoff, their tokens), in abort order

    def __post_init__(self) -> None:
        if self.prompt_tokens is not None and len(self.prompt_tokens) != len(self.groups):
            raise ValueError(
                f"StepWork: {len(self.prompt_tokens)} prompt_tokens for {len(self.groups)} groups"
            )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"groups": self.groups, "num_tail": self.num_tail,
                                  "aborted": [list(a) for a in self.aborted]}
        if self.prompt_tokens is not None:
            out["prompt_tokens"] = self.prompt_tokens
        return out

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> StepWork:
        groups = d["groups"]
        assert isinstance(groups, list)
        raw = d.get("aborted", [])
        assert isinstance(raw, list)
        rawp = d.get("prompt_tokens")
        prompts = [int(x) for x in rawp] if isinstance(rawp, list) else None
        return cls([[int(x) for x in g] for g in groups], int(d["num_tail"]),  # type: ignore[call-overload]
                   prompts, [(int(a[0]), int(a[1])) for a in raw])


class StepSample:
    """One remembered step, flattened and pre-sorted for fast predictions."""

    __slots__ = ("_extras", "aborted", "asc_group", "asc_len", "asc_prompt", "asc_resp",
                 "by_work", "group_size", "mean_prompt", "num_groups")

    def __init__(
        self,
        groups: Sequence[Sequence[int]],
        num_tail: int = 0,
        aborted: Sequence[tuple[int, int]] = (),
        prompt_tokens: Sequence[int] | None = None,
    ) -> None:
        self.num_groups = len(groups)
        self._extras: dict[int, FloatArray] = {}  # stand-ins for ``extra`` aborted groups
        sizes = np.fromiter((len(g) for g in groups), dtype=np.int64, count=self.num_groups)
        flat = np.fromiter((x for g in groups for x in g), dtype=np.float64, count=int(sizes.sum()))
        group_of = np.repeat(np.arange(self.num_groups), sizes)
        first = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        resp = np.arange(flat.size, dtype=np.int64) - np.repeat(first, sizes)
        work = np.bincount(group_of, weights=flat, minlength=self.num_groups)
        asc = np.argsort(flat, kind="stable")
        self.asc_len = flat[asc]
        self.asc_group = group_of[asc]
        self.asc_resp = resp[asc]
        # per request (same order), the prompt tokens its group's responses hold as context;
        # None when the step reported none. The cutoff's stand-ins hold the mean prompt.
        self.asc_prompt: FloatArray | None = None
        self.mean_prompt = 0.0
        if prompt_tokens is not None and any(prompt_tokens) and flat.size:
            self.asc_prompt = np.asarray(prompt_tokens, dtype=np.float64)[self.asc_group]
            self.mean_prompt = float(self.asc_prompt.mean())
        bulk = np.arange(num_tail, self.num_groups)
        bulk = bulk[np.argsort(-work[bulk], kind="stable")]
        self.by_work = np.concatenate((np.arange(num_tail), bulk)).astype(np.int64)
        self.group_size = max(1, round(float(sizes.mean()))) if self.num_groups else 1
        n = self.group_size
        # each aborted group as the cutoff saw it: finished responses (their mean length),
        # the others running past every delivered response
        self.aborted = [
            np.array([t / f] * min(f, n - 1) + [RUNNING_TOKENS] * (n - min(f, n - 1)))
            if f > 0 else np.full(n, RUNNING_TOKENS)
            for f, t in aborted
        ]
        if not self.aborted and self.num_groups and bool(np.all(sizes == n)):
            # a step without a cutoff: the groups a cutoff would abort are the slowest ones,
            # so its longest group (by its longest response), still running, stands in
            slowest = int(np.argmax(flat.reshape(self.num_groups, n).max(axis=1)))
            grp = np.sort(flat[slowest * n:(slowest + 1) * n])
            grp[-1] = RUNNING_TOKENS
            self.aborted = [grp]

    def extras(self, extra: int) -> FloatArray:
        """Response lengths of ``extra`` stand-ins for the cutoff's groups, group after group:
        the step's own aborted groups (cycled), else groups running past everything."""
        ex = self._extras.get(extra)
        if ex is None:
            n = self.group_size
            ex = np.concatenate([self.aborted[i % len(self.aborted)] for i in range(extra)]) \
                if self.aborted else np.full(extra * n, RUNNING_TOKENS)
            self._extras[extra] = ex
        return ex
