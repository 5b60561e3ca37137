"""JSON decoding of completion bodies with their token-id arrays parsed at C speed.

A completion body is mostly token ids (vLLM ``token_ids`` / ``prompt_token_ids`` per choice,
SGLang ``output_ids``). ``json.loads`` makes a string and then an int of every id, and
``wire_bodies`` then checks each is an int: about 0.15 us per token, most of what a Python router
pays per delivered token. ``loads`` cuts each such array out of the body, parses it with numpy
(``int64``; anything that is not a list of integers falls back to ``json.loads``), decodes the
rest with ``json.loads`` and puts the ids back as tuples of ints (``EncodedIds``, which keep
the array's JSON text: a continued piece sends a piece's ids back without encoding them). The
result equals ``json.loads(body)`` except that those arrays are tuples (``wire_bodies._int_tuple``
takes them as already checked). ``drop_prompt_ids``: the echoed ``prompt_token_ids`` become None unparsed
(a continued piece's prompt is the router's own prefix, as long as the piece's tokens).

An id array is found by its key (``"token_ids"`` etc. directly after ``{`` or ``,``, which no
JSON string can contain unescaped); a list of integers holds no ``]``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tailsieve.runtime.engine.backends import EncodedIds

_KEYS = frozenset((b'"token_ids"', b'"prompt_token_ids"', b'"output_ids"'))
_PROMPT = b'"prompt_token_ids"'
_WS = b" \t\r\n"
_MARK = "\x00ids:"  # placeholder string for the k-th array while the rest is decoded
_MIN_BYTES = 256  # shorter arrays stay with json.loads (numpy's call costs more than it saves)
_INT64_MAX = np.iinfo(np.int64).max
_MAX = np.maximum.reduce  # ndarray.max without its Python wrapper (half the cost per array)


def loads(body: bytes, drop_prompt_ids: bool = False) -> Any:
    """``json.loads(body)`` with id arrays as tuples (see the module docstring)."""
    parts: list[bytes] = []
    arrays: list[EncodedIds] = []
    last = 0
    for key, lb, rb in _arrays(body):
        if drop_prompt_ids and key == _PROMPT:
            parts += (body[last:lb], b"null")
        elif rb - lb > _MIN_BYTES:
            ids = _parse(body[lb + 1 : rb])
            if ids is None:
                return json.loads(body)  # not a plain list of integers: the slow path decides
            parts += (body[last:lb], b'"\\u0000ids:%d"' % len(arrays))
            arrays.append(ids)
        else:
            continue
        last = rb + 1
    if not parts:
        return json.loads(body)
    parts.append(body[last:])
    out = json.loads(b"".join(parts))
    if arrays and _restore(out, arrays) != len(arrays):
        return json.loads(body)  # an array somewhere else than expected: decode it plainly
    return out


def _arrays(body: bytes) -> list[tuple[bytes, int, int]]:
    """(key, index of ``[``, index of ``]``) of every id array, in body order."""
    out = []
    n = len(body)
    i = body.find(b'_ids"')
    while i >= 0:
        end = i + 5
        q = body.rfind(b'"', 0, i)
        key = body[q:end]
        if key in _KEYS:
            j = q - 1
            while j >= 0 and body[j] in _WS:
                j -= 1
            k = end
            while k < n and body[k] in _WS:
                k += 1
            if j >= 0 and body[j] in b"{," and k < n and body[k] == 58:  # ":"
                k += 1
                while k < n and body[k] in _WS:
                    k += 1
                if k < n and body[k] == 91:  # "["
                    rb = body.find(b"]", k)
                    if rb < 0:
                        break
                    out.append((key, k, rb))
                    end = rb
        i = body.find(b'_ids"', end)
    return out


def _parse(chunk: bytes) -> EncodedIds | None:
    """The integers of a JSON array's inside, or None when it is not only integers."""
    if b"+" in chunk or b"-" in chunk:  # not JSON / negative: the slow path decides
        return None
    try:
        arr = np.fromstring(chunk, dtype=np.int64, sep=",")
    except ValueError:
        return None
    if len(arr) != chunk.count(b",") + 1 or _MAX(arr) == _INT64_MAX:  # saturated: too big
        return None
    return EncodedIds(arr.tolist(), "[" + chunk.decode("ascii") + "]")  # one copy: list -> ids


def _restore(out: Any, arrays: list[EncodedIds]) -> int:
    """Put the parsed arrays back where their placeholders are (choices of an OpenAI body, or
    SGLang items); returns how many were restored."""
    items: list[Any]
    if isinstance(out, dict):
        choices = out.get("choices")
        items = [out, *choices] if isinstance(choices, list) else [out]
    elif isinstance(out, list):
        items = out
    else:
        return 0
    n = 0
    for it in items:
        if not isinstance(it, dict):
            continue
        for key in ("token_ids", "prompt_token_ids", "output_ids"):
            v = it.get(key)
            if v.__class__ is str and v.startswith(_MARK):
                it[key] = arrays[int(v[len(_MARK) :])]
                n += 1
    return n


__all__ = ["loads"]
