"""The suffix index against brute force: counts, longest match, drafts, removal."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.drafts.suffix_index import SuffixIndex, best_draft

SEQS = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=30), min_size=1, max_size=4)


def naive_longest_match(seqs: Sequence[Sequence[int]], context: Sequence[int],
                        max_len: int) -> int:
    """The longest suffix of ``context`` (<= max_len) found in some sequence followed by a
    token, by scanning every position."""
    best = 0
    for length in range(1, min(max_len, len(context)) + 1):
        pat = list(context[len(context) - length:])
        if any(list(s[i:i + length]) == pat for s in seqs for i in range(len(s) - length)):
            best = length
    return best


def naive_count(seqs: Sequence[Sequence[int]], sub: Sequence[int]) -> int:
    n = len(sub)
    return sum(list(s[i:i + n]) == list(sub) for s in seqs for i in range(len(s) - n + 1))


@settings(max_examples=150, deadline=None)
@given(SEQS, st.lists(st.integers(0, 3), min_size=1, max_size=12), st.integers(2, 8))
def test_longest_match_equals_a_naive_search(seqs: list[list[int]], context: list[int],
                                             depth: int) -> None:
    idx = SuffixIndex(depth)
    for i, s in enumerate(seqs):
        idx.extend(i, s)
    assert idx.longest_match(context) == naive_longest_match(seqs, context, depth - 1)


@settings(max_examples=100, deadline=None)
@given(SEQS, st.lists(st.integers(0, 3), min_size=1, max_size=5))
def test_counts_equal_naive_counts_also_after_growing_in_pieces(seqs: list[list[int]],
                                                                sub: list[int]) -> None:
    idx = SuffixIndex(6)
    for i, s in enumerate(seqs):  # grown in two pieces, as a running response grows
        idx.extend(i, s[:len(s) // 2])
    for i, s in enumerate(seqs):
        idx.extend(i, s[len(s) // 2:])
    assert idx.count(sub) == naive_count(seqs, sub)


@settings(max_examples=100, deadline=None)
@given(SEQS, st.lists(st.integers(0, 3), min_size=0, max_size=30))
def test_remove_restores_the_index_exactly(seqs: list[list[int]], extra: list[int]) -> None:
    idx = SuffixIndex(5)
    for i, s in enumerate(seqs):
        idx.extend(i, s)
    before = (dict(idx._count), {k: dict(v) for k, v in idx._children.items()})
    idx.extend("x", extra)
    idx.remove("x")
    assert (idx._count, idx._children) == before


def naive_speculate(seqs: Sequence[Sequence[int]], context: Sequence[int], max_spec: int,
                    depth: int, factor: float, min_prob: float) -> tuple[tuple[int, ...], float]:
    """arctic-inference's ``SuffixTree::speculate`` by brute force: every match length
    ascending, path speculation by naive counts (the first-seen token on equal counts), the
    best score kept on ``>=``."""
    best: tuple[tuple[int, ...], float] = ((), 0.0)
    for m in range(1, min(len(context), depth - 1) + 1):
        key = list(context[len(context) - m:])
        if naive_count(seqs, key) == 0:
            break
        limit = min(max_spec, int(m * factor + 1e-6), depth - m)
        out: list[int] = []
        prob, score = 1.0, 0.0
        while len(out) < limit and len(key) < depth:
            nexts: dict[int, int] = {}
            for s in seqs:
                for i in range(len(s) - len(key)):
                    if list(s[i:i + len(key)]) == key:
                        nexts[s[i + len(key)]] = nexts.get(s[i + len(key)], 0) + 1
            if not nexts:
                break
            top = max(nexts.values())
            tok = min((t for t, c in nexts.items() if c == top),
                      key=lambda t: _first_seen(seqs, key, t))
            prob *= top / naive_count(seqs, key)
            if prob < min_prob:
                break
            out.append(tok)
            score += prob
            key.append(tok)
        if out and score >= best[1]:
            best = (tuple(out), score)
    return best


def _first_seen(seqs: Sequence[Sequence[int]], key: list[int], tok: int) -> tuple[int, int]:
    """Where ``key + [tok]`` first ends, in insertion order (sequence, then position)."""
    n = len(key) + 1
    for j, s in enumerate(seqs):
        for i in range(len(s) - n + 1):
            if list(s[i:i + n]) == [*key, tok]:
                return (j, i)
    return (len(seqs), 0)


@settings(max_examples=200, deadline=None)
@given(SEQS, st.lists(st.integers(0, 3), min_size=1, max_size=12), st.integers(1, 8),
       st.sampled_from([0.0, 0.1, 0.4]), st.sampled_from([0.5, 1.0, 2.0]))
def test_speculate_equals_arctic_rule_by_brute_force(
        seqs: list[list[int]], context: list[int], max_spec: int, min_prob: float,
        factor: float) -> None:
    depth = 8
    idx = SuffixIndex(depth)
    for i, s in enumerate(seqs):
        idx.extend(i, s)
    d = idx.speculate(context, max_spec, max_spec_factor=factor, min_token_prob=min_prob)
    tokens, score = naive_speculate(seqs, context, max_spec, depth, factor, min_prob)
    assert abs(d.score - score) < 1e-9
    if len({round(score, 9)}) and d.token_ids != tokens:
        # equal counts at a branch may be ordered differently; the score must still agree
        assert len(d.token_ids) == len(tokens)
    m = d.match_len
    assert len(d.token_ids) <= min(max_spec, int(m * factor + 1e-6), depth - m)
    if d.token_ids:  # matched context + draft occurs in some sequence
        assert naive_count(seqs, [*context[len(context) - m:], *d.token_ids]) >= 1


def test_hand_counted_draft_follows_the_most_frequent_continuation() -> None:
    idx = SuffixIndex(24)
    idx.extend("a", [1, 2, 3, 4, 5])
    idx.extend("b", [1, 2, 3, 4, 6])
    idx.extend("c", [1, 2, 3, 7])
    # context ends "1 2 3": three occurrences, continuations 4 (x2) and 7: take 4 (p = 2/3),
    # then 5 or 6 (p = 2/3 * 1/2 = 1/3); the spec factor allows 3 tokens
    d = idx.speculate([9, 1, 2, 3], 8, max_spec_factor=1.0, min_token_prob=0.1)
    assert d.match_len == 3
    assert d.token_ids == (4, 5)  # 5 first seen, then the path stops at sequence ends
    assert abs(d.score - (2 / 3 + 1 / 3)) < 1e-9
    # a stricter probability floor stops before the split
    assert idx.speculate([9, 1, 2, 3], 8, min_token_prob=0.5).token_ids == (4,)
    # match and draft never exceed the tree depth: a 23-token match of a repeated sequence
    # would draft 1 token, so the best score takes a 16-token match drafting 8
    rep = SuffixIndex(24)
    rep.extend(0, list(range(40)))
    d = rep.speculate(list(range(24)), 8)
    assert d.token_ids == tuple(range(24, 32)) and d.match_len == 16
    # spec factor: a 1-token match drafts at most 1 token
    assert len(idx.speculate([3], 8).token_ids) == 1


def test_best_draft_prefers_the_higher_score_and_the_first_on_ties() -> None:
    idx1, idx2 = SuffixIndex(8), SuffixIndex(8)
    idx1.extend(0, [1, 2, 3, 1, 2, 9])
    idx2.extend(0, [1, 2, 3])
    a, b = idx1.speculate([1, 2], 4), idx2.speculate([1, 2], 4)
    assert best_draft(a, b) is (a if a.score >= b.score else b)
    assert best_draft(a, a) is a
