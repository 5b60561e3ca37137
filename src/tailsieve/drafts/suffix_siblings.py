"""``suffix-siblings``: vLLM's ``suffix`` method late in a step, the simulator's server tree.

arctic-inference's ``SuffixDecodingCache`` (called by vLLM 0.32's ``SuffixDecodingProposer``)
drafts each verify step from the request's own tree (its prompt and tokens) and the server's
global tree of the responses that ran there, and keeps the higher-scoring draft. Here the
server's tree holds ``k - 1`` of the group's siblings, complete: what a response that is still
running finds once those siblings have finished on its server. ``k = 1`` is the own tree alone.
The simulator reads this curve with ``k`` = 1 + the siblings finished on the server at that
moment (``model.spec_engine``, placement ``server``).

Only siblings sampled independently of the response enter (``Group.independent``); a response
with fewer than ``k - 1`` of them is not replayed at that ``k`` (the cell stays empty rather
than repeat a smaller ``k``).
"""

from __future__ import annotations

from tailsieve.drafts.base import replay_against
from tailsieve.drafts.group import DraftConfig, Group
from tailsieve.drafts.replay import ReplayStats
from tailsieve.drafts.seer_group import SeerGroupSource
from tailsieve.drafts.suffix_index import SuffixIndex


class SuffixSiblingsSource(SeerGroupSource):
    """Own tree plus a server tree holding ``k - 1`` complete independent siblings."""

    name = "suffix-siblings"
    depends_on_k = True

    def replay_group(self, group: Group, k: int, config: DraftConfig) -> ReplayStats:
        stats = ReplayStats()
        for i, response in enumerate(group.responses):
            mates = group.mates(i, self.independent_only)
            if len(mates) < k - 1:
                continue
            corpus = None
            if k > 1:
                corpus = SuffixIndex(config.max_depth)
                for j in mates[:k - 1]:
                    corpus.extend(j, group.responses[j])
            replay_against(stats, group.prompt_ids, response, config, corpus)
        return stats
