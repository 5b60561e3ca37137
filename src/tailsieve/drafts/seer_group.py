"""``seer-group``: the whole group drafts for each response (Seer, arXiv 2511.14617).

Seer's grouped suffix-tree draft server sees every sibling, wherever it runs, and its divided
rollout lets some siblings run ahead of others. The bound modelled here is the most the group
can give: the other siblings' complete responses (plus the request's own prompt and tokens).
It does not depend on placement (``k``). The running counterpart, siblings only as far as they
got, is ``suffix-running`` with the whole group on one server (``k = 8``).

By default only siblings sampled independently of the response enter its corpus
(``Group.independent``: on the shipped trace, the three others recorded on the same server;
responses of the other server can be copies, an artefact of two unseeded servers drawing the
same random numbers). ``SeerGroupSource(independent_only=False)`` takes every sibling.
"""

from __future__ import annotations

from tailsieve.drafts.base import replay_against
from tailsieve.drafts.group import DraftConfig, Group
from tailsieve.drafts.replay import ReplayStats
from tailsieve.drafts.suffix_index import SuffixIndex


class SeerGroupSource:
    """Corpus: the other siblings' complete responses (independent ones by default)."""

    name = "seer-group"
    depends_on_k = False

    def __init__(self, independent_only: bool = True) -> None:
        self.independent_only = independent_only

    def replay_group(self, group: Group, k: int, config: DraftConfig) -> ReplayStats:
        stats = ReplayStats()
        pools: dict[tuple[int, ...], list[int]] = {}
        for i in range(len(group.responses)):  # responses that share a corpus (up to themselves)
            mates = tuple(sorted([i, *group.mates(i, self.independent_only)]))
            pools.setdefault(mates, []).append(i)
        for mates, members in pools.items():
            corpus = SuffixIndex(config.max_depth)
            for j in mates:
                corpus.extend(j, group.responses[j])
            for i in members:
                corpus.remove(i)
                replay_against(stats, group.prompt_ids, group.responses[i], config, corpus)
                corpus.extend(i, group.responses[i])
        return stats
