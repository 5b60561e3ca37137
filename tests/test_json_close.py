"""The tolerance comparison the float tests rely on catches what it must."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def test_last_bit_differences_pass(assert_json_close: Callable[..., None]) -> None:
    assert_json_close({"a": [0.005116154270954248, 1]}, {"a": [0.005116154270954247, 1]})


@pytest.mark.parametrize(("a", "b", "message"), [
    ({"a": [0.1, 2]}, {"a": [0.1000001, 2]}, r"\$\.a\[0\]: 0\.1 != 0\.1000001"),
    ({"a": 1}, {"b": 1}, r"\$: keys differ"),
    ([1, 2], [1, 2, 3], r"\$: lengths 2 != 3"),
    ({"n": "x"}, {"n": "y"}, r"\$\.n: 'x' != 'y'"),
    (True, 1, r"\$: True != 1"),
])
def test_real_differences_fail_and_are_located(assert_json_close: Callable[..., None], a: Any,
                                               b: Any, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        assert_json_close(a, b)
