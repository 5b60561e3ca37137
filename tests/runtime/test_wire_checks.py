"""The checkers the real-vLLM tests rely on, on made-up outputs (no server): a near-tie passes
``check_logprobs_close``, a wrong token or context does not; ``check_chains`` accepts a correct
splice and rejects a lost, repeated or off-by-one token, and a piece delivered twice."""

from __future__ import annotations

import pytest
from engine_outputs import EngineOutput, check_logprobs_close
from vllm_wire import WireExchange, WireOutput, check_chains

PROMPT, PROMPT_IDS = "p", [100, 101, 102]


def out(ids: list[int], lps: list[float], tops: list[dict[str, float]]) -> EngineOutput:
    return EngineOutput(tuple(ids), tuple(f"t{i}" for i in ids), tuple(lps), tuple(tops))


def top(*pairs: tuple[int, float]) -> dict[str, float]:
    return {f"t{i}": lp for i, lp in pairs}


def test_equal_outputs_do_not_diverge() -> None:
    a = out([1, 2], [-0.1, -0.2], [top((1, -0.1)), top((2, -0.2))])
    c = check_logprobs_close(a, a)
    assert c.divergence is None and c.common == 2 and c.max_logprob_diff == 0


def test_a_near_tie_passes_and_a_wrong_token_fails() -> None:
    a = out([1, 2, 9], [-0.1, -0.70, -1.0], [top((1, -0.1)), top((2, -0.70), (3, -0.71)), top((9, -1))])
    b = out([1, 3, 7], [-0.12, -0.69, -1.0], [top((1, -0.12)), top((3, -0.69), (2, -0.72)), top((7, -1))])
    assert check_logprobs_close(a, b).divergence == 1
    wrong = out([1, 5], [-0.1, -3.0], [top((1, -0.1)), top((5, -3.0))])
    with pytest.raises(AssertionError, match="first divergence"):
        check_logprobs_close(wrong, b)


def test_a_different_context_fails_on_the_prefix_logprobs() -> None:
    a = out([1, 2], [-0.1, -0.2], [top((1, -0.1)), top((2, -0.2))])
    b = out([1, 2], [-0.1, -2.2], [top((1, -0.1)), top((2, -2.2))])
    with pytest.raises(AssertionError, match=r"differs by 2\.000"):
        check_logprobs_close(a, b)


def exchange(prompt: object, tokens: list[int], reason: str | None, cap: int) -> WireExchange:
    ex = WireExchange("http://x", {"prompt": prompt, "max_tokens": cap})
    ex.outputs[0] = WireOutput(token_ids=tokens, finish_reason=reason,
                               prompt_token_ids=PROMPT_IDS if isinstance(prompt, str) else None)
    ex.complete = reason is not None
    return ex


def chain_log(seam_prompt: list[int]) -> list[WireExchange]:
    """A response of 7 tokens in two pieces: [1, 2, 3] then [4, 5, 6, 7]."""
    return [exchange(PROMPT, [1, 2, 3], "length", 3),
            exchange(PROMPT_IDS + seam_prompt, [4, 5, 6, 7], "length", 8 - len(seam_prompt))]


def test_check_chains_accepts_the_splice_and_rejects_a_bad_one() -> None:
    segs = check_chains(chain_log([1, 2, 3]), {PROMPT: [[1, 2, 3, 4, 5, 6, 7]]}, 8)
    assert [(s.start, s.end) for s in segs[PROMPT][0]] == [(0, 3), (3, 7)]
    bad = {"lost": [1, 2, 4, 5, 6, 7], "repeated": [1, 2, 3, 3, 4, 5, 6, 7],
           "changed": [1, 2, 3, 4, 5, 6, 8]}
    for name, delivered in bad.items():
        with pytest.raises(AssertionError):
            check_chains(chain_log([1, 2, 3]), {PROMPT: [delivered]}, 8)
            pytest.fail(f"a {name} token passed")
    with pytest.raises(AssertionError):  # the continued prompt left out a generated token
        check_chains(chain_log([1, 2]), {PROMPT: [[1, 2, 3, 4, 5, 6, 7]]}, 8)


def test_check_chains_rejects_one_piece_delivered_twice() -> None:
    log = chain_log([1, 2, 3])
    with pytest.raises(AssertionError):
        check_chains(log, {PROMPT: [[1, 2, 3, 4, 5, 6, 7]] * 2}, 8)
