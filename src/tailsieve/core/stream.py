"""An ordered stream of prompt ids, the only source of fresh prompts for a rollout."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice


class PromptStream:
    """Draws prompt ids in order from an iterable (finite or infinite).

    The stream remembers how many ids it handed out (``num_drawn``), so a resumed run can
    rebuild the same iterable and ``skip`` what was already consumed.
    """

    def __init__(self, prompt_ids: Iterable[str]) -> None:
        self._it: Iterator[str] = iter(prompt_ids)
        self.num_drawn = 0
        self.exhausted = False

    def draw(self, k: int) -> list[str]:
        """Up to ``k`` next ids (fewer only when the stream ends)."""
        if k <= 0 or self.exhausted:
            return []
        out = [str(p) for p in islice(self._it, k)]
        self.num_drawn += len(out)
        if len(out) < k:
            self.exhausted = True
        return out

    def skip(self, k: int) -> None:
        """Discard ``k`` ids (used when restoring a checkpoint)."""
        self.draw(k)
