"""What every draft source shares: a recorded group, the drafter settings, the interface.

A draft source answers one question: replaying a recorded group whose responses sit ``k`` to a
server, how many tokens does each verify step emit? Sources that do not depend on ``k``
(prompt lookup, the whole group, the previous epoch) ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tailsieve.drafts.prompt_lookup import NgramConfig
from tailsieve.drafts.replay import ReplayStats
from tailsieve.drafts.suffix_index import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_SPEC_FACTOR,
    DEFAULT_MIN_TOKEN_PROB,
)

Tokens = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Group:
    """One prompt's responses in one epoch, with the prompt's token ids (empty when unknown),
    the same prompt's responses of the previous epoch (``None`` for the first epoch or when the
    trace has none) and the recording server of each response (``None`` when unknown).

    ``trace_groups`` orders the responses by (recording server, sample), so that consecutive
    responses, which share a server when placed ``k`` to a server, were sampled independently
    (see ``independent``)."""

    prompt_id: str
    epoch: int
    prompt_ids: Tokens
    responses: tuple[Tokens, ...]
    previous: tuple[Tokens, ...] | None = None
    replicas: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.responses:
            raise ValueError(f"group {self.prompt_id!r} epoch {self.epoch}: no responses")
        if self.replicas is not None and len(self.replicas) != len(self.responses):
            raise ValueError(f"group {self.prompt_id!r}: {len(self.replicas)} replicas for "
                             f"{len(self.responses)} responses")

    def independent(self, i: int, j: int) -> bool:
        """Whether responses ``i`` and ``j`` were sampled independently of each other: recorded
        on the same server (different batch slots draw different random numbers). Two unseeded
        servers draw the same random stream, so responses recorded on different servers at the
        same moment can be copies (see docs/speculation.md)."""
        return self.replicas is None or self.replicas[i] == self.replicas[j]

    def mates(self, i: int, independent_only: bool = True) -> list[int]:
        """The siblings of response ``i`` (not ``i`` itself), in group order; only those
        sampled independently of it when ``independent_only``."""
        return [j for j in range(len(self.responses))
                if j != i and (not independent_only or self.independent(i, j))]


@dataclass(frozen=True, slots=True)
class DraftConfig:
    """Drafter settings: ``max_spec_tokens`` (vLLM's ``num_speculative_tokens``), the suffix
    tree's depth, spec factor and minimum token probability (vLLM's ``suffix_decoding_*``
    defaults), and the n-gram window."""

    max_spec_tokens: int = 8
    max_depth: int = DEFAULT_MAX_DEPTH
    max_spec_factor: float = DEFAULT_MAX_SPEC_FACTOR
    min_token_prob: float = DEFAULT_MIN_TOKEN_PROB
    ngram: NgramConfig = field(default_factory=NgramConfig)

    def __post_init__(self) -> None:
        if self.max_spec_tokens < 1:
            raise ValueError(f"max_spec_tokens must be >= 1, got {self.max_spec_tokens}")
        if self.max_depth < 2:
            raise ValueError(f"max_depth must be >= 2, got {self.max_depth}")
        if self.max_spec_factor < 0:
            raise ValueError(f"max_spec_factor must be >= 0, got {self.max_spec_factor}")
        if not 0.0 <= self.min_token_prob <= 1.0:
            raise ValueError(f"min_token_prob must be in [0, 1], got {self.min_token_prob}")

    def to_dict(self) -> dict[str, object]:
        return {"max_spec_tokens": self.max_spec_tokens, "max_tree_depth": self.max_depth,
                "max_spec_factor": self.max_spec_factor, "min_token_prob": self.min_token_prob,
                "prompt_lookup_min": self.ngram.prompt_lookup_min,
                "prompt_lookup_max": self.ngram.prompt_lookup_max}


class DraftSource(Protocol):
    """A draft source: its name, whether ``k`` matters, and the replay of one group."""

    name: str
    depends_on_k: bool

    def replay_group(self, group: Group, k: int, config: DraftConfig) -> ReplayStats:
        """Verify-step counts of ``group``'s responses (``k`` of them per server)."""
        ...
