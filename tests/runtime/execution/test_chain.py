"""Pieces joined into one response: exact concatenation, stop strings across a seam,
min_tokens, penalties refused."""

from __future__ import annotations

import json

import pytest

from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.execution.chain import ChainError, Piece, ResponseChain, check_continuable


def piece(texts: list[str], first_id: int, reason: str = "length") -> Piece:
    offs, at = [], 0
    for t in texts:
        offs.append(at)
        at += len(t)
    ids = tuple(range(first_id, first_id + len(texts)))
    lps = tuple(-0.1 * (i + 1) for i in ids)
    return Piece(ids, "".join(texts), reason, lps, tuple(offs))


def test_join_is_exact_concatenation() -> None:
    c = ResponseChain(max_tokens=10, prompt_ids=(5, 6))
    c.add(piece(["a", "b", "c"], 0), 3)
    assert not c.done and c.remaining == 7
    nxt = c.next_prompt(PromptInput("p", text="hi"))
    assert nxt.token_ids == (5, 6, 0, 1, 2)
    c.add(piece(["d", "e"], 3, "stop"), 3)
    assert c.done and c.final is not None
    r = c.final
    assert r.token_ids == (0, 1, 2, 3, 4) and r.text == "abcde" and r.finish_reason == "stop"
    assert r.logprobs == pytest.approx([-0.1 * (i + 1) for i in range(5)])


def test_an_empty_piece_keeps_the_responses_logprobs() -> None:
    """A piece aborted by a move before it generated a token (SGLang answers an empty
    ``output_token_logprobs``, parsed as no logprobs) does not cost the response its logprobs;
    a piece with tokens but without logprobs does."""
    c = ResponseChain(max_tokens=10, prompt_ids=(5,))
    c.add(piece(["a", "b"], 0), 3)
    c.add(Piece((), "", "moved", None), 3)
    c.add(piece(["c"], 2, "stop"), 3)
    assert c.final is not None and c.final.token_ids == (0, 1, 2)
    assert c.final.logprobs == pytest.approx([-0.1, -0.2, -0.3])
    d = ResponseChain(max_tokens=10, prompt_ids=(5,))
    d.add(piece(["a"], 0), 3)
    d.add(Piece((1,), "b", "stop", None), 3)
    assert d.final is not None and d.final.logprobs is None


def test_cap_reached_ends_with_length() -> None:
    c = ResponseChain(max_tokens=4, prompt_ids=(1,))
    c.add(piece(["a", "b"], 0), 2)
    c.add(piece(["c", "d"], 2), 2)
    assert c.final is not None and c.final.finish_reason == "length"
    assert c.final.num_tokens == 4


def test_stop_string_across_a_seam_cuts_where_the_server_would() -> None:
    # one go: tokens "xx", "EN", "Dyy", ... with stop "END": the server stops at the token that
    # completes "END" ("Dyy", index 2) and returns the text before it
    c = ResponseChain(max_tokens=20, prompt_ids=(1,), stop=("END",))
    c.add(piece(["xx", "EN"], 0), 2)
    assert not c.done
    c.add(piece(["Dyy", "zz"], 2), 2)
    assert c.final is not None
    assert c.final.text == "xx"
    assert c.final.token_ids == (0, 1, 2)
    assert c.final.finish_reason == "stop"
    assert c.final.logprobs is not None and len(c.final.logprobs) == 3


def test_stop_string_inside_a_piece_is_the_servers() -> None:
    c = ResponseChain(max_tokens=20, prompt_ids=(1,), stop=("END",))
    c.add(piece(["xx", "E"], 0), 2)
    c.add(piece(["a", "b"], 2, "stop"), 2)  # no stop string spans the seam
    assert c.final is not None and c.final.text == "xxEab" and c.final.num_tokens == 4


def test_stop_across_a_seam_without_offsets_is_refused() -> None:
    c = ResponseChain(max_tokens=20, prompt_ids=(1,), stop=("END",))
    c.add(Piece((0, 1), "xxEN", "length"), 2)
    with pytest.raises(ChainError, match="text offsets"):
        c.add(Piece((2,), "D", "length"), 2)


def test_min_tokens_reduced_by_generated() -> None:
    sp = SamplingParams(max_tokens=100, extra={"min_tokens": 30})
    c = ResponseChain(max_tokens=100, prompt_ids=(1,))
    assert c.piece_sampling(sp, 16).extra["min_tokens"] == 16  # capped at the piece
    c.add(piece(["a"] * 16, 0), 16)
    assert c.piece_sampling(sp, 16).extra["min_tokens"] == 14
    assert c.piece_sampling(sp, 16).max_tokens == 16
    c.add(piece(["a"] * 16, 16), 16)
    assert c.piece_sampling(sp, None).extra["min_tokens"] == 0
    assert c.piece_sampling(sp, None).max_tokens == 68


def test_piece_cap_and_the_requests_max_tokens() -> None:
    """A piece asks for what is left, at most ``piece_tokens``: through ``max_tokens=`` of
    ``build_request`` (no new sampling object), the same body as ``piece_sampling`` gives."""
    from tailsieve.runtime.engine.backends import Backend, PromptInput
    from tailsieve.runtime.engine.wire_bodies import build_request

    sp = SamplingParams(max_tokens=40, temperature=0.5)
    c = ResponseChain(max_tokens=40, prompt_ids=(1,))
    assert c.piece_cap(16) == 16 and c.piece_cap(None) == 40
    c.add(piece(["a"] * 16, 0), 16)
    c.add(piece(["a"] * 16, 16), 16)
    assert c.piece_cap(16) == 8 and c.piece_cap(None) == 8
    prompt = PromptInput("p", token_ids=(1, 2))
    for backend in (Backend.VLLM, Backend.SGLANG):
        via_cap = build_request(backend, "m", prompt, sp, 1, max_tokens=c.piece_cap(16))
        assert via_cap == build_request(backend, "m", prompt, c.piece_sampling(sp, 16), 1)
        forced = build_request(backend, "m", prompt, sp, 1, forced_tokens=5, max_tokens=8)
        assert forced == build_request(backend, "m", prompt, sp, 1, forced_tokens=5)


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(presence_penalty=0.5),
        SamplingParams(extra={"frequency_penalty": 0.2}),
        SamplingParams(extra={"repetition_penalty": 1.1}),
    ],
)
def test_penalties_are_refused_with_one_line(sp: SamplingParams) -> None:
    with pytest.raises(ChainError) as err:
        check_continuable(sp)
    assert "\n" not in str(err.value) and "penalty" in str(err.value)


def test_neutral_penalties_are_fine() -> None:
    check_continuable(SamplingParams(presence_penalty=0.0, extra={"repetition_penalty": 1.0}))


def test_continued_prompt_is_encoded_once_and_spliced() -> None:
    import json

    from tailsieve.runtime.engine.backends import EncodedIds
    from tailsieve.runtime.engine.ids_json import loads
    from tailsieve.runtime.engine.lean_http import _encode

    c = ResponseChain(max_tokens=10, prompt_ids=(5, 6))
    c.add(piece(["a", "b"], 0), 2)
    first = c.next_prompt(PromptInput("p", text="hi")).token_ids
    c.add(piece(["c"], 2), 1)
    ids = c.next_prompt(PromptInput("p", text="hi")).token_ids
    assert isinstance(first, EncodedIds) and isinstance(ids, EncodedIds)
    assert ids == (5, 6, 0, 1, 2) and json.loads(ids.json) == list(ids)
    body = {"model": "m", "prompt": ids, "max_tokens": 3}
    assert json.loads(_encode(body)) == {"model": "m", "prompt": [5, 6, 0, 1, 2], "max_tokens": 3}
    raw = {"choices": [{"token_ids": [1, 2], "prompt_token_ids": [5, 6, 0]}], "usage": {}}
    for text in (json.dumps(raw), json.dumps(raw, separators=(",", ":"))):  # both spacings
        out = loads(text.encode(), drop_prompt_ids=True)
        assert out["choices"][0] == {"token_ids": [1, 2], "prompt_token_ids": None}


@pytest.mark.parametrize("key", ["prompt", "input_ids"])
def test_prompt_ids_are_spliced_for_vllm_and_sglang(key: str) -> None:
    import json

    from tailsieve.runtime.engine.backends import EncodedIds
    from tailsieve.runtime.engine.lean_http import _encode

    ids = EncodedIds((7, 8, 9), "[7, 8, 9]")  # the cached text (spaced), not re-encoded
    body = {"sampling_params": {"max_new_tokens": 3}, key: ids, "stream": False}
    raw = _encode(body)
    assert b'"%s":[7, 8, 9]' % key.encode() in raw
    assert json.loads(raw) == {"sampling_params": {"max_new_tokens": 3}, key: [7, 8, 9],
                               "stream": False}
    assert json.loads(_encode({key: ids})) == {key: [7, 8, 9]}


def test_a_piece_keeps_the_servers_json_of_its_ids_until_the_response_ends() -> None:
    from tailsieve.runtime.engine.backends import EncodedIds

    prompt = EncodedIds((5, 6), "[5, 6]")
    c = ResponseChain(max_tokens=10, prompt_ids=prompt)
    c.add(Piece(EncodedIds((7, 8), "[7,\n 8]"), "ab", "length"), 2)
    ids = c.next_prompt(PromptInput("p", text="hi")).token_ids
    assert isinstance(ids, EncodedIds) and ids == (5, 6, 7, 8)
    assert json.loads(ids.json) == [5, 6, 7, 8] and "7,\n 8" in ids.json  # spliced, not re-encoded
    c.add(Piece(EncodedIds((9,), "[9]"), "c", "stop"), 2)
    assert c.final is not None and c.final.token_ids == (7, 8, 9)
    assert type(c.final.token_ids) is tuple and type(c.pieces[0].token_ids) is tuple
    assert c.pieces[-1].ids_json is None  # the last piece's JSON is not kept
    one = ResponseChain(max_tokens=10, prompt_ids=prompt)
    one.add(Piece(EncodedIds((7,), "[7]"), "a", "stop"), 4)
    assert one.final is not None and type(one.final.token_ids) is tuple


def test_a_continued_prompts_json_is_built_only_when_read() -> None:
    """A runner that sends no JSON (verl's Ray handles) never encodes the ids; read later,
    the JSON is the one the ids had when asked, even after the chain changed."""
    import pickle

    from tailsieve.runtime.engine.backends import EncodedIds

    calls: list[tuple[int, ...]] = []

    def encode(ids: tuple[int, ...]) -> str:
        calls.append(ids)
        return "[" + ",".join(map(str, ids)) + "]"

    lazy = EncodedIds((1, 2), encode)
    assert lazy == (1, 2) and calls == []
    assert lazy.json == "[1,2]" and lazy.json == "[1,2]" and calls == [(1, 2)]  # once
    back = pickle.loads(pickle.dumps(EncodedIds((3, 4), encode)))
    assert type(back) is EncodedIds and back == (3, 4) and back.json == "[3,4]"
    assert json.loads(EncodedIds((5, 6)).json) == [5, 6]

    c = ResponseChain(max_tokens=10, prompt_ids=(5, 6))
    c.add(piece(["a", "b"], 0), 2)
    ids = c.next_prompt(PromptInput("p", text="hi")).token_ids
    assert isinstance(ids, EncodedIds) and not c._encoded  # nothing encoded yet
    c.drop_last()
    c.add(piece(["c"], 2), 1)  # the chain changed before the JSON was read
    assert json.loads(ids.json) == [5, 6, 0, 1] == list(ids)
    again = c.next_prompt(PromptInput("p", text="hi")).token_ids
    assert json.loads(again.json) == [5, 6, 2] == list(again)
