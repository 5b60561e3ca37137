"""``ngram``: vLLM's prompt lookup as a draft source (the matcher is ``prompt_lookup``)."""

from __future__ import annotations

from tailsieve.drafts.group import DraftConfig, Group
from tailsieve.drafts.prompt_lookup import NgramMatcher
from tailsieve.drafts.replay import ReplayStats, verify


class NgramSource:
    """``ngram``: vLLM's prompt lookup over the request's own prompt and tokens."""

    name = "ngram"
    depends_on_k = False

    def replay_group(self, group: Group, k: int, config: DraftConfig) -> ReplayStats:
        stats = ReplayStats()
        for r in group.responses:
            t = min(1, len(r))  # token 0 comes from the prefill step
            matcher = NgramMatcher(config.ngram, [*group.prompt_ids, *r[:t]])
            while t < len(r):
                draft = matcher.propose(config.max_spec_tokens)
                emitted = verify(stats, draft, r, t)
                matcher.extend(r[t:t + emitted])
                t += emitted
            stats.responses += 1
        return stats
