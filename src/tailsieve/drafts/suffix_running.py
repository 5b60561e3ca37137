"""``suffix-running``: vLLM's ``suffix`` method (V1 runner with arctic-inference).

One suffix tree per server holds every response running there, so siblings dealt to the same
server draft for each other while they run; each request also drafts from its own prompt and
tokens. ``k`` = the group's responses on one server (``k = 1``: only itself). Other groups'
responses on the server are left out of its tree (they rarely share a prompt's wording).
"""

from __future__ import annotations

from tailsieve.drafts.colocated import replay_colocated, server_slices
from tailsieve.drafts.group import DraftConfig, Group
from tailsieve.drafts.replay import ReplayStats


class SuffixRunningSource:
    """Per-server tree over the co-located running siblings, decoded in lockstep."""

    name = "suffix-running"
    depends_on_k = True
    finished_only = False

    def replay_group(self, group: Group, k: int, config: DraftConfig) -> ReplayStats:
        stats = ReplayStats()
        for part in server_slices(len(group.responses), k):
            replay_colocated(stats, group.prompt_ids, [group.responses[i] for i in part],
                             config, finished_only=self.finished_only)
        return stats
