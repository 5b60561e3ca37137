"""Drafting as one request does on a suffix-tree server: its own tree plus corpora.

arctic-inference's ``SuffixDecodingCache`` (what vLLM's ``suffix`` method calls) keeps a tree
per request (its prompt and generated tokens) and one global tree per server; each verify step
drafts from both and keeps the higher-scoring draft. ``Requester`` is that request;
``replay_against`` replays one response against a fixed corpus.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailsieve.drafts.group import DraftConfig, Tokens
from tailsieve.drafts.replay import ReplayStats, verify
from tailsieve.drafts.suffix_index import SuffixIndex, best_draft


class Requester:
    """One request's own suffix tree (its prompt and what it generated, arctic-inference's
    per-request tree) and its context."""

    __slots__ = ("context", "local", "position", "response")

    def __init__(self, prompt_ids: Sequence[int], response: Tokens, max_depth: int) -> None:
        self.response = response
        self.position = min(1, len(response))  # token 0 comes from the prefill step
        self.context: list[int] = [*prompt_ids, *response[:self.position]]
        self.local = SuffixIndex(max_depth)
        self.local.extend(0, self.context)

    @property
    def running(self) -> bool:
        return self.position < len(self.response)

    def step(self, stats: ReplayStats, config: DraftConfig,
             *corpora: SuffixIndex) -> Tokens:
        """One verify step drafted from the own tree and ``corpora`` (best score wins);
        returns the tokens it emits (already appended to the own tree and context)."""
        ctx = self.context[-config.max_depth:]
        drafts = [idx.speculate(ctx, config.max_spec_tokens, config.max_spec_factor,
                                config.min_token_prob) for idx in (self.local, *corpora)]
        draft = best_draft(*drafts)
        emitted = verify(stats, draft.token_ids, self.response, self.position)
        new = self.response[self.position:self.position + emitted]
        self.position += emitted
        self.context.extend(new)
        self.local.extend(0, new)
        return new


def replay_against(stats: ReplayStats, prompt_ids: Sequence[int], response: Tokens,
                   config: DraftConfig, corpus: SuffixIndex | None) -> None:
    """Replay one response drafted from its own tree and a fixed ``corpus``."""
    req = Requester(prompt_ids, response, config.max_depth)
    corpora = () if corpus is None else (corpus,)
    while req.running:
        req.step(stats, config, *corpora)
    stats.responses += 1
