"""The math word problems: seeded, graded, answers right (checked by an independent solver that
reads the numbers from the question text), the shipped file reproducible, the answer check."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.record.math_problems import (
    INSTRUCTION,
    NUM_LEVELS,
    SHIPPED_PER_LEVEL,
    SHIPPED_PROMPTS,
    SHIPPED_SEED,
    MathProblem,
    check_answer,
    extract_answer,
    generate,
)

# keyword in the question -> (arithmetic operations, solver over the question's numbers)
Solver = Callable[[list[int]], float]
SOLVERS: list[tuple[str, int, Solver]] = [
    ("more. How many", 1, lambda x: x[0] + x[1]),
    ("gave", 1, lambda x: x[0] - x[1]),
    ("passengers get off", 1, lambda x: x[0] - x[1]),
    ("packs of", 1, lambda x: x[0] * x[1]),
    ("shared equally", 1, lambda x: x[0] / x[1]),
    ("km per hour for", 1, lambda x: x[0] * x[1]),
    ("notebooks", 2, lambda x: x[2] - x[0] * x[1]),
    ("rows of apple trees", 2, lambda x: x[0] * x[1] + x[2]),
    ("pages are left", 2, lambda x: x[0] - x[1] * x[2]),
    ("trays of", 3, lambda x: (x[0] * x[1] - x[2]) / 2),
    ("an hour and works", 3, lambda x: x[0] * x[1] * x[2] - x[3]),
    ("Museum tickets", 4, lambda x: x[4] - (x[0] * x[2] + x[1] * x[3])),
    ("jacket costs", 4, lambda x: x[3] * (x[0] * (100 - x[1]) / 100 - x[2])),
    ("leak drains", 2, lambda x: x[0] / (x[1] - x[2])),
    ("first week", 4, lambda x: sum(x[0] + i * x[1] for i in range(x[2]))),
    ("catch up", 3, lambda x: x[0] * x[1] / (x[2] - x[0])),
]


def solve(p: MathProblem) -> tuple[int, float]:
    nums = [int(n) for n in re.findall(r"\d+", p.question)]
    hits = [(ops, f) for key, ops, f in SOLVERS if key in p.question]
    assert len(hits) == 1, p.question
    ops, f = hits[0]
    return ops, f(nums)


def test_generated_answers_are_right_and_graded() -> None:
    problems = generate(seed=7, num_per_level=40)
    assert len(problems) == NUM_LEVELS * 40
    ops_by_level: dict[int, list[int]] = {}
    for p in problems:
        ops, want = solve(p)
        assert p.answer == pytest.approx(want), p.question
        assert p.answer > 0 and isinstance(p.answer, int)
        ops_by_level.setdefault(p.level, []).append(ops)
    means = [sum(v) / len(v) for _, v in sorted(ops_by_level.items())]
    # one operation, then two, then three or more on average (level 5 adds percentages,
    # rates and series rather than more operations)
    assert means[:3] == [1, 1, 2] and min(means[3:]) >= 3
    assert len({p.question for p in problems}) == len(problems)


def test_levels_interleave_so_any_prefix_is_graded_evenly() -> None:
    problems = generate(seed=1, num_per_level=8)
    assert [p.level for p in problems[:10]] == [1, 2, 3, 4, 5] * 2
    assert [p.prompt_id for p in problems[:3]] == ["math-0000", "math-0001", "math-0002"]


def test_seeded_and_reproducible() -> None:
    a = generate(seed=3, num_per_level=10)
    assert a == generate(seed=3, num_per_level=10)
    b = generate(seed=4, num_per_level=10)
    assert sum(x.question != y.question for x, y in zip(a, b, strict=True)) > 40
    assert generate(seed=3, num_per_level=12)[:50] == a  # growing the set keeps the prefix


def test_shipped_file_is_the_seeded_set() -> None:
    problems = generate(SHIPPED_SEED, SHIPPED_PER_LEVEL)
    lines = SHIPPED_PROMPTS.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(problems) >= 256
    assert [json.loads(x) for x in lines] == [p.to_dict() for p in problems]
    first = json.loads(lines[0])
    assert first["messages"][0]["role"] == "user"
    assert first["messages"][0]["content"].endswith(INSTRUCTION)


def test_bad_size_is_refused() -> None:
    with pytest.raises(ConfigError, match="num_per_level"):
        generate(num_per_level=0)


@settings(max_examples=200, deadline=None)
@given(
    answer=st.integers(1, 10**7),
    wrong=st.integers(1, 10**7),
    style=st.sampled_from(["Answer: {}", "answer is {}", "Answer: ${}", "**Answer:** {}"]),
    noise=st.text(alphabet="abc xyz.\n", max_size=30),
)
def test_answer_check(answer: int, wrong: int, style: str, noise: str) -> None:
    text = f"We add 3 and 4 to get {wrong}.{noise}\n" + style.format(f"{answer:,}")
    assert check_answer(text, answer)
    assert check_answer(text, wrong) == (wrong == answer)
    assert extract_answer(f"so {wrong} in the end") == wrong  # no marker: the last number
    assert extract_answer("no number here") is None
    assert not check_answer("nothing", answer)
