"""Draft sources on hand-made groups: hand-counted verify steps, full acceptance when a sibling
repeats a response, the concurrency of co-located siblings, tau within [1, d + 1]."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.drafts import DraftConfig, Group
from tailsieve.drafts.colocated import server_slices
from tailsieve.drafts.measure import SOURCES
from tailsieve.drafts.ngram import NgramSource
from tailsieve.drafts.prompt_lookup import NgramConfig
from tailsieve.drafts.replay import ReplayStats, accepted_prefix, verify
from tailsieve.drafts.rhymerl_epoch import RhymeRLEpochSource
from tailsieve.drafts.seer_group import SeerGroupSource
from tailsieve.drafts.suffix_finished import SuffixFinishedSource
from tailsieve.drafts.suffix_running import SuffixRunningSource
from tailsieve.drafts.suffix_siblings import SuffixSiblingsSource

RESPONSE = tuple(range(100, 140))  # 40 distinct tokens: nothing repeats within it


def test_verify_accounting() -> None:
    stats = ReplayStats()
    assert accepted_prefix([1, 2, 9], [0, 1, 2, 3], 1) == 2
    assert verify(stats, [1, 2, 9], [0, 1, 2, 3], 1) == 3  # 2 accepted + the bonus token
    assert verify(stats, [3, 4], [0, 1, 2, 3], 3) == 1  # the last token: no bonus after it
    tot = stats.total()
    assert (tot.steps, tot.emitted, tot.drafted, tot.accepted) == (2, 4, 5, 3)
    assert tot.tau == 2.0 and abs(tot.acceptance_rate - 0.6) < 1e-12


def test_ngram_hand_counted() -> None:
    # prompt 1 2 3 4 5 6; response 9 1 2 3 4 5 6 7: after "9 1" the 1-gram "1" drafts
    # "2 3 4 5 6 9 1 2" (window 1..4, d = 8) ; accepted 2 3 4 5 6, rejected at 9 vs 7
    g = Group("p", 0, (1, 2, 3, 4, 5, 6), ((9, 1, 2, 3, 4, 5, 6, 7),))
    stats = NgramSource().replay_group(g, 1, DraftConfig(ngram=NgramConfig(1, 4)))
    # steps: t=1 (context ...6 9: "9" unseen, "6 9" unseen -> no draft, emit 1),
    # t=2 (draft from "1": 2 3 4 5 6 9 1 2 -> 5 accepted, emit 6): done at 8 tokens
    tot = stats.total()
    assert (tot.steps, tot.emitted, tot.accepted) == (2, 7, 5)


def test_a_sibling_repeating_the_response_gives_full_acceptance_under_seer_group() -> None:
    g = Group("p", 0, (), (RESPONSE, RESPONSE))
    cfg = DraftConfig(max_spec_tokens=8)
    tot = SeerGroupSource().replay_group(g, 8, cfg).total()
    assert tot.accepted == tot.drafted  # every drafted token accepted
    # per response: token 0 from prefill; a 1-token match drafts 1 (spec factor 1), then
    # 3, 7, 8, 8 and the last 7: t = 1, 3, 7, 15, 24, 33 -> 6 steps emitting 39 tokens
    assert tot.steps == 12 and tot.emitted == 2 * (len(RESPONSE) - 1)


def test_running_siblings_in_lockstep_cannot_draft_ahead_of_themselves() -> None:
    # two identical siblings on one server advance together: neither holds tokens the other
    # has not generated, so with nothing repeated inside the response nothing is drafted
    g = Group("p", 0, (), (RESPONSE, RESPONSE))
    run = SuffixRunningSource().replay_group(g, 2, DraftConfig()).total()
    assert run.accepted == 0 and run.tau == 1.0
    # but a short sibling that finished (on the same server) is a corpus for a longer one
    # later on: it holds tokens 125..134, which the long one reaches long after it finished
    short = RESPONSE[25:35]
    g2 = Group("p", 0, (), (short, RESPONSE))
    fin = SuffixFinishedSource().replay_group(g2, 2, DraftConfig()).total()
    assert fin.accepted > 0
    # ... only on the same server
    apart = SuffixFinishedSource().replay_group(g2, 1, DraftConfig()).total()
    assert apart.accepted == 0
    # the running tree keeps finished responses too (V1 caches them): at least as good
    both = SuffixRunningSource().replay_group(g2, 2, DraftConfig()).total()
    assert both.accepted >= fin.accepted


def test_suffix_siblings_drafts_from_finished_siblings_on_its_server_only() -> None:
    """vLLM suffix late in a step: a sibling complete in the server's tree drafts the whole
    response; without it (k = 1: only the own tree) nothing repeats, nothing is drafted."""
    g = Group("p", 0, (), (RESPONSE, RESPONSE))
    cfg = DraftConfig(max_spec_tokens=8)
    alone = SuffixSiblingsSource().replay_group(g, 1, cfg).total()
    assert alone.accepted == 0 and alone.tau == 1.0
    with_one = SuffixSiblingsSource().replay_group(g, 2, cfg).total()
    assert with_one.accepted == with_one.drafted > 0
    assert with_one == SeerGroupSource().replay_group(g, 8, cfg).total()  # the whole group
    # a response with fewer independent siblings than k - 1 is not replayed at that k
    split = Group("p", 0, (), (RESPONSE,) * 4, replicas=(0, 0, 1, 1))
    assert SuffixSiblingsSource().replay_group(split, 3, cfg).total().steps == 0
    assert SuffixSiblingsSource().replay_group(split, 2, cfg).responses == 4


def test_rhymerl_drafts_epoch_one_from_epoch_zero_only() -> None:
    first = Group("p", 0, (), (RESPONSE,))
    assert RhymeRLEpochSource().replay_group(first, 1, DraftConfig()).total().steps == 0
    second = Group("p", 1, (), (RESPONSE,), previous=(RESPONSE,))
    tot = RhymeRLEpochSource().replay_group(second, 1, DraftConfig()).total()
    assert tot.accepted == tot.drafted > 0


def test_server_slices() -> None:
    assert server_slices(8, 4) == [range(0, 4), range(4, 8)]
    assert server_slices(5, 2) == [range(0, 2), range(2, 4), range(4, 5)]


GROUPS = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=25), min_size=1,
                  max_size=4)


@settings(max_examples=60, deadline=None)
@given(GROUPS, GROUPS, st.sampled_from(sorted(SOURCES)), st.integers(1, 4),
       st.integers(1, 8))
def test_tau_is_within_one_and_d_plus_one_and_every_token_is_emitted_once(
        responses: list[list[int]], previous: list[list[int]], source: str, k: int,
        d: int) -> None:
    g = Group("p", 1, (0, 1, 2), tuple(map(tuple, responses)), tuple(map(tuple, previous)))
    stats = SOURCES[source]().replay_group(g, k, DraftConfig(max_spec_tokens=d))
    tot = stats.total()
    assert 1.0 <= tot.tau <= d + 1
    assert tot.accepted <= tot.drafted <= d * tot.steps
    replayed = source != "suffix-siblings" or len(responses) >= k  # enough siblings for k
    # all but the prefill token
    assert tot.emitted == (sum(len(r) - 1 for r in responses) if replayed else 0)
