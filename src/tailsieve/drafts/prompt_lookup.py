"""Prompt lookup as vLLM's ``ngram`` method drafts (``vllm/v1/spec_decode/ngram_proposer.py``).

The context is the request's prompt plus the tokens it generated. vLLM finds the longest
n-gram, ``prompt_lookup_min <= n <= prompt_lookup_max``, that ends the context and occurs
earlier in it; of the occurrences of that length it takes the earliest, and drafts the (at most
``num_speculative_tokens``) tokens that follow it, which may run into the context's own end.
vLLM defaults both bounds to 5 when neither is given; its docs' example sets
``prompt_lookup_max`` to 4.

``NgramMatcher`` keeps, for every n in range, the first position of each n-gram, so a lookup is
``prompt_lookup_max - prompt_lookup_min + 1`` dict probes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NgramConfig:
    """vLLM's ``prompt_lookup_min`` / ``prompt_lookup_max`` (both >= 1, min <= max)."""

    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 4

    def __post_init__(self) -> None:
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max, got "
                             f"{self.prompt_lookup_min}, {self.prompt_lookup_max}")


class NgramMatcher:
    """One request's context (prompt + generated tokens) and its n-gram first positions."""

    __slots__ = ("_first", "config", "tokens")

    def __init__(self, config: NgramConfig, tokens: Sequence[int] = ()) -> None:
        self.config = config
        self.tokens: list[int] = []
        self._first: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens to the context."""
        lo, hi = self.config.prompt_lookup_min, self.config.prompt_lookup_max
        first, seq = self._first, self.tokens
        for tok in tokens:
            seq.append(tok)
            n = len(seq)
            for size in range(lo, min(hi, n) + 1):
                key = tuple(seq[n - size:])
                if key not in first:
                    first[key] = n - size

    def propose(self, num_speculative_tokens: int) -> tuple[int, ...]:
        """The draft vLLM's ``ngram`` proposer makes for the current context."""
        lo, hi = self.config.prompt_lookup_min, self.config.prompt_lookup_max
        seq, first = self.tokens, self._first
        n = len(seq)
        for size in range(min(hi, n), lo - 1, -1):
            start = first.get(tuple(seq[n - size:]))
            if start is not None and start < n - size:  # an earlier occurrence than the end
                begin = start + size
                return tuple(seq[begin:begin + num_speculative_tokens])
        return ()

