"""A per-replica prefix cache for the emulator, at block granularity (as vLLM's).

A prompt's leading full blocks of ``block_tokens`` token ids are identified by a chained hash
(each block's hash covers every token before it). ``lookup`` returns how many leading prompt
tokens are cached; ``insert`` adds the blocks of a sequence (its prompt plus the tokens it
generated, so a response continued on the same replica finds its whole prefix cached).
Least recently used blocks are evicted beyond ``max_blocks``, which ``fit`` lowers and raises as
running requests take and free KV blocks (vLLM keeps a freed block cached until a running
request needs it). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence


class PrefixCache:
    """Block hashes of cached prefixes, least recently used first."""

    def __init__(self, block_tokens: int = 16, max_blocks: int = 1 << 20) -> None:
        if block_tokens < 1 or max_blocks < 1:
            raise ValueError("block_tokens and max_blocks must be >= 1")
        self.block_tokens = block_tokens
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.hit_tokens = 0  # cumulative cached prompt tokens found by lookup
        self.query_tokens = 0  # cumulative prompt tokens looked up

    def _hashes(self, ids: Sequence[int]) -> Iterator[int]:
        h = 0
        b = self.block_tokens
        for k in range(len(ids) // b):
            h = hash((h, tuple(ids[k * b : (k + 1) * b])))
            yield h

    def lookup(self, ids: Sequence[int]) -> int:
        """Leading tokens of ``ids`` in the cache (whole blocks; the last prompt token is never
        counted as cached, as vLLM always computes at least one)."""
        n = 0
        for h in self._hashes(ids):
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            n += self.block_tokens
        n = min(n, max(len(ids) - 1, 0))
        self.hit_tokens += n
        self.query_tokens += len(ids)
        return n

    def fit(self, max_blocks: int) -> None:
        """Hold at most ``max_blocks`` (at least one): what the running requests leave of the
        KV budget; the least recently used go first."""
        self.max_blocks = max(1, max_blocks)
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)

    def insert(self, ids: Sequence[int]) -> None:
        """Cache the full blocks of ``ids``."""
        for h in self._hashes(ids):
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)

    def __len__(self) -> int:
        return len(self._blocks)
