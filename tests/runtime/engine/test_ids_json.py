"""``ids_json.loads``: equal to ``json.loads`` (id arrays as tuples) on every body, whatever its
spacing; anything that is not a plain list of integers goes the slow path unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.runtime.engine.backends import Backend, EncodedIds
from tailsieve.runtime.engine.ids_json import loads
from tailsieve.runtime.engine.wire_bodies import parse_response

ID_KEYS = ("token_ids", "prompt_token_ids", "output_ids")


def _tuples(obj: Any, key: str | None = None) -> Any:
    """``json.loads`` output with id arrays as tuples (what ``loads`` returns)."""
    if isinstance(obj, dict):
        return {k: _tuples(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        if key in ID_KEYS and all(type(x) is int for x in obj):
            return tuple(obj)
        return [_tuples(x) for x in obj]
    return obj


def _same(got: Any, want: Any) -> bool:
    """Equal, tuples and lists of equal items alike (short arrays stay lists)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(
            _same(got[k], want[k]) for k in want
        )
    if isinstance(want, list | tuple):
        return isinstance(got, list | tuple) and len(got) == len(want) and all(
            _same(a, b) for a, b in zip(got, want, strict=True)
        )
    return type(got) is type(want) and got == want


ids = st.lists(st.integers(0, 2**31 - 1), max_size=300)
choice = st.fixed_dictionaries(
    {"index": st.integers(0, 3), "token_ids": ids, "prompt_token_ids": ids | st.none(),
     "text": st.text(max_size=40)}
)
spacing = st.sampled_from([(",", ":"), (", ", ": "), (" ,\n ", " : ")])


@settings(max_examples=200, deadline=None)
@given(choices=st.lists(choice, min_size=1, max_size=3), sep=spacing)
def test_equals_json_loads(choices: list[dict[str, Any]], sep: tuple[str, str]) -> None:
    body = json.dumps({"choices": choices, "usage": {"completion_tokens": 3}}, separators=sep)
    got = loads(body.encode())
    assert _same(got, json.loads(body))
    for ch in got["choices"]:
        if len(ch["token_ids"]) > 80:  # long arrays come back as tuples with their JSON
            assert isinstance(ch["token_ids"], EncodedIds)
            assert json.loads(ch["token_ids"].json) == list(ch["token_ids"])


@pytest.mark.parametrize(
    "inner",
    ["1, 2.5" + ", 7" * 100, "1, -3" + ", 7" * 100, "1, true" + ", 7" * 100,
     "99999999999999999999" + ", 7" * 100, "1, " + "7, " * 100 + '"x"'],
)  # fmt: skip
def test_anything_but_plain_integers_goes_the_slow_path(inner: str) -> None:
    body = ('{"choices": [{"token_ids": [' + inner + '], "text": "a"}]}').encode()
    out = loads(body)
    assert out == json.loads(body) and type(out["choices"][0]["token_ids"]) is list


def test_key_inside_text_and_dropped_prompt_ids() -> None:
    text = 'say {"token_ids": [1, 2]} and , "output_ids": [3]'
    long = list(range(1000, 1200))
    body = json.dumps({"choices": [{"text": text, "token_ids": long,
                                    "prompt_token_ids": long}]}).encode()  # fmt: skip
    out = loads(body, drop_prompt_ids=True)
    assert out["choices"][0] == {"text": text, "token_ids": tuple(long), "prompt_token_ids": None}
    # an id array where it is not expected (not a choice): decoded plainly, nothing lost
    odd = json.dumps({"meta": {"token_ids": long}, "choices": []}).encode()
    assert loads(odd) == {"meta": {"token_ids": long}, "choices": []}


def test_sglang_items_and_parse_response() -> None:
    long = list(range(500))
    items = [{"text": "x", "output_ids": long, "meta_info": {"completion_tokens": 500,
                                                             "finish_reason": {"type": "length"}}}]
    out = loads(json.dumps(items).encode())
    assert out[0]["output_ids"] == tuple(long)
    (r,) = parse_response(Backend.SGLANG, out, 1, "here")
    assert r.token_ids == tuple(long) and r.num_tokens == 500
    assert type(r.token_ids) is tuple  # the JSON text is dropped unless asked for
    (r,) = parse_response(Backend.SGLANG, out, 1, "here", keep_json=True)
    assert isinstance(r.token_ids, EncodedIds) and r.token_ids == tuple(long)
