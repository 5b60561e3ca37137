"""``suffix-finished``: suffix decoding under vLLM's Model Runner V2, where only finished
responses enter the server's corpus.

A sibling helps only once it has finished on the same server, so only the longer responses of a
server's share of the group gain from the shorter ones (decoded in lockstep, see
``colocated``). ``k = 1`` is the request's own prompt and tokens alone.
"""

from __future__ import annotations

from tailsieve.drafts.suffix_running import SuffixRunningSource


class SuffixFinishedSource(SuffixRunningSource):
    """Per-server tree over the co-located siblings that have finished."""

    name = "suffix-finished"
    finished_only = True
