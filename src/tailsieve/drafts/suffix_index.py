"""A depth-limited suffix index: what a suffix-decoding tree holds, as counted substrings.

Suffix decoding (arXiv 2411.04975; vLLM's ``suffix`` method through arctic-inference's
``SuffixDecodingCache``) keeps a suffix tree of depth ``max_depth`` over a set of token
sequences. A node of the tree is a substring of length <= ``max_depth``; its count is the number
of places it occurs. This index stores exactly those counts (a dict keyed by the substring)
and each substring's next tokens, which answers the two questions a drafter asks:

* the **longest match**: the longest suffix of the context that occurs in the sequences
  followed by at least one token;
* the **draft**: from a match of length ``m``, follow the most frequent next token while the
  estimated probability (product of ``count(child) / count(node)``) stays >=
  ``min_token_prob``, for at most ``min(max_spec_tokens, floor(max_spec_factor * m))`` tokens
  and never past ``max_depth`` (match plus draft), as arctic-inference's path speculation does;
  its score is the sum of those probabilities. Of all match lengths ``m`` up to the longest,
  the best score wins (the longer match on ties), as ``SuffixTree::speculate`` chooses; lengths
  whose token limit cannot beat the best score so far are skipped.

Sequences can grow (``extend``: a running response) and leave (``remove``: eviction, or a
response that must not see itself). Memory is O(``max_depth``) entries per stored token.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

DEFAULT_MAX_DEPTH = 24  # vLLM's suffix_decoding_max_tree_depth default
DEFAULT_MIN_TOKEN_PROB = 0.1  # vLLM's suffix_decoding_min_token_prob default
DEFAULT_MAX_SPEC_FACTOR = 1.0  # vLLM's suffix_decoding_max_spec_factor default


@dataclass(frozen=True, slots=True)
class Draft:
    """Drafted tokens, their summed probability estimates (``score``, arctic-inference's
    ranking) and the length of the context suffix they were matched on."""

    token_ids: tuple[int, ...] = ()
    score: float = 0.0
    match_len: int = 0


EMPTY_DRAFT = Draft()


class SuffixIndex:
    """Counts of every substring of length <= ``max_depth`` over a set of sequences."""

    __slots__ = ("_children", "_count", "_seqs", "max_depth")

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth}")
        self.max_depth = max_depth
        self._count: dict[tuple[int, ...], int] = {}
        self._children: dict[tuple[int, ...], dict[int, int]] = {}
        self._seqs: dict[Hashable, list[int]] = {}

    # ------------------------------------------------------------------ contents
    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    def count(self, substring: Sequence[int]) -> int:
        """Occurrences of ``substring`` (length <= ``max_depth``) in the stored sequences."""
        return self._count.get(tuple(substring), 0)

    def extend(self, seq_id: Hashable, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to sequence ``seq_id`` (created when new)."""
        seq = self._seqs.setdefault(seq_id, [])
        count, children, depth = self._count, self._children, self.max_depth
        for tok in tokens:
            seq.append(tok)
            tail = tuple(seq[-depth:])
            size = len(tail)
            key = tail[-1:]
            count[key] = count.get(key, 0) + 1
            for length in range(2, size + 1):
                key = tail[size - length:]
                count[key] = count.get(key, 0) + 1
                parent = key[:-1]
                ch = children.get(parent)
                if ch is None:
                    children[parent] = {tok: 1}
                else:
                    ch[tok] = ch.get(tok, 0) + 1

    def remove(self, seq_id: Hashable) -> None:
        """Forget sequence ``seq_id`` and every count it added."""
        seq = self._seqs.pop(seq_id)
        count, children, depth = self._count, self._children, self.max_depth
        for end in range(len(seq)):
            tok = seq[end]
            tail = tuple(seq[max(0, end + 1 - depth):end + 1])
            size = len(tail)
            for length in range(1, size + 1):
                key = tail[size - length:]
                left = count[key] - 1
                if left:
                    count[key] = left
                else:
                    del count[key]
                if length >= 2:
                    parent = key[:-1]
                    ch = children[parent]
                    c = ch[tok] - 1
                    if c:
                        ch[tok] = c
                    else:
                        del ch[tok]
                        if not ch:
                            del children[parent]

    # ------------------------------------------------------------------ queries
    def longest_match(self, context: Sequence[int], max_len: int | None = None) -> int:
        """Length of the longest suffix of ``context`` that occurs followed by a token (so
        that it can draft; at most ``max_len``, default ``max_depth - 1``). A suffix that
        occurs only at the very end of a sequence (the request's own latest tokens) does not
        count: arctic-inference scores every match length and such a match drafts nothing."""
        limit = self.max_depth - 1 if max_len is None else min(max_len, self.max_depth - 1)
        n = len(context)
        limit = min(limit, n)
        children = self._children
        best = 0
        for length in range(1, limit + 1):
            if tuple(context[n - length:]) not in children:
                break
            best = length
        return best

    def speculate(self, context: Sequence[int], max_spec_tokens: int,
                  max_spec_factor: float = DEFAULT_MAX_SPEC_FACTOR,
                  min_token_prob: float = DEFAULT_MIN_TOKEN_PROB) -> Draft:
        """The best-scoring draft over every match length (see the module docstring); on equal
        scores the longer match wins, as in arctic-inference."""
        longest = self.longest_match(context)
        best = EMPTY_DRAFT
        n = len(context)
        for match in range(longest, 0, -1):
            limit = min(max_spec_tokens, int(match * max_spec_factor + 1e-6),
                        self.max_depth - match)
            if limit <= best.score:  # cannot beat the best (a tie keeps the longer match)
                if match * max_spec_factor <= best.score:
                    break  # nor can any shorter match
                continue
            draft = self._walk(tuple(context[n - match:]), limit, min_token_prob)
            if draft.token_ids and draft.score > best.score:
                best = draft
        return best

    def _walk(self, key: tuple[int, ...], limit: int, min_token_prob: float) -> Draft:
        """Follow the most frequent next token from ``key`` (arctic's path speculation)."""
        count, children = self._count, self._children
        match = len(key)
        prob, score = 1.0, 0.0
        out: list[int] = []
        while len(out) < limit:
            ch = children.get(key)
            if not ch:
                break
            tok, cnt = max(ch.items(), key=_by_count)
            prob *= cnt / count[key]
            if prob < min_token_prob:
                break
            out.append(tok)
            score += prob
            key = (*key, tok)
        return Draft(tuple(out), score, match)


def _by_count(item: tuple[int, int]) -> int:
    return item[1]


def best_draft(*drafts: Draft) -> Draft:
    """The draft with the highest score (the first on ties), as arctic-inference chooses
    between a request's own tree and the server's tree."""
    best = EMPTY_DRAFT
    for d in drafts:
        if d.token_ids and (not best.token_ids or d.score > best.score):
            best = d
    return best
