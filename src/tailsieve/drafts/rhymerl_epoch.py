"""``rhymerl-epoch``: the same prompt's responses of the previous epoch draft (RhymeRL,
arXiv 2508.18588).

Epoch ``e`` is drafted from epoch ``e - 1``'s complete responses to the same prompt (plus the
request's own prompt and tokens); responses of the first epoch have no history and are not
replayed. It does not depend on placement (``k``).
"""

from __future__ import annotations

from tailsieve.drafts.base import replay_against
from tailsieve.drafts.group import DraftConfig, Group
from tailsieve.drafts.replay import ReplayStats
from tailsieve.drafts.suffix_index import SuffixIndex


class RhymeRLEpochSource:
    """Corpus: the previous epoch's responses to the same prompt."""

    name = "rhymerl-epoch"
    depends_on_k = False

    def replay_group(self, group: Group, k: int, config: DraftConfig) -> ReplayStats:
        stats = ReplayStats()
        if group.previous is None:
            return stats
        corpus = SuffixIndex(config.max_depth)
        for i, r in enumerate(group.previous):
            corpus.extend(i, r)
        for r in group.responses:
            replay_against(stats, group.prompt_ids, r, config, corpus)
        return stats
