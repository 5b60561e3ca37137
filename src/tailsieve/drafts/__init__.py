"""Draft sources for speculative decoding, measured on recorded rollouts.

Each source is one idea of where drafts come from: the request's own context (``ngram``,
vLLM's prompt lookup), the siblings co-located on a server while they run
(``suffix-running``, vLLM's ``suffix``) or once finished (``suffix-finished``), the whole group
(``seer-group``) and the previous epoch (``rhymerl-epoch``). ``measure_acceptance`` replays a
recorded trace against them; see docs/speculation.md.
"""

from tailsieve.drafts.group import DraftConfig, DraftSource, Group
from tailsieve.drafts.measure import K_VALUES, SOURCES, AcceptanceTable, measure_acceptance
from tailsieve.drafts.prompt_lookup import NgramConfig, NgramMatcher
from tailsieve.drafts.replay import ReplayStats
from tailsieve.drafts.suffix_index import Draft, SuffixIndex
from tailsieve.drafts.trace_groups import trace_groups

__all__ = [
    "K_VALUES",
    "SOURCES",
    "AcceptanceTable",
    "Draft",
    "DraftConfig",
    "DraftSource",
    "Group",
    "NgramConfig",
    "NgramMatcher",
    "ReplayStats",
    "SuffixIndex",
    "measure_acceptance",
    "trace_groups",
]
