"""A seeded generator of math word problems of graded difficulty, and their answer check.

Five levels, from one arithmetic step to multi-step problems with percentages, rates and
series::

    level 1  one addition or subtraction
    level 2  one multiplication or division (exact)
    level 3  two steps (cost and change, rows plus extra, ...)
    level 4  three steps (halves of a remainder, wages minus spending, ...)
    level 5  multi-step: a discount then a coupon, fill and drain rates, an arithmetic series,
             a catch-up time

Every answer is a positive integer that the template computes itself, so a response is judged by
``check_answer`` (the number after the last ``Answer:``, else the last number in the text).
Problems are interleaved by level (problem ``i`` has level ``i mod 5 + 1``), so any prefix of
the set is graded evenly. ``generate(seed, num_per_level)`` is deterministic: the shipped set
(``SHIPPED_PROMPTS``) is ``generate(SHIPPED_SEED, SHIPPED_PER_LEVEL)``, written by
``write_problems``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.workload.shipped import SHIPPED_PROMPTS as SHIPPED_PROMPTS  # the shipped set

NUM_LEVELS = 5
SHIPPED_SEED = 2028
SHIPPED_PER_LEVEL = 64
INSTRUCTION = "Solve the problem step by step. End with a last line of the form 'Answer: <number>'."

_NAMES = ("Ava", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hiro", "Iris", "Jonas",
          "Kira", "Liam", "Maya", "Noah", "Olga", "Pablo", "Rosa", "Sam", "Tara", "Umar")
_ITEMS = ("apples", "pencils", "marbles", "stickers", "cookies", "stamps", "shells", "cards",
          "books", "oranges", "buttons", "coins")


@dataclass(frozen=True, slots=True)
class MathProblem:
    """One problem: ``prompt_id``, difficulty ``level`` (1-5), ``question`` and integer
    ``answer``; ``messages`` is the chat form sent to an instruct model."""

    prompt_id: str
    level: int
    question: str
    answer: int

    @property
    def messages(self) -> tuple[dict[str, str], ...]:
        return ({"role": "user", "content": f"{self.question}\n{INSTRUCTION}"},)

    def to_dict(self) -> dict[str, Any]:
        """The JSONL record (a prompt file line ``tailsieve rollout`` / ``record`` read)."""
        return {
            "prompt_id": self.prompt_id,
            "level": self.level,
            "messages": [dict(m) for m in self.messages],
            "answer": self.answer,
        }


Template = Callable[[np.random.Generator], tuple[str, int]]


def _pick(rng: np.random.Generator, xs: Sequence[str]) -> str:
    return xs[int(rng.integers(len(xs)))]


def _two_names(rng: np.random.Generator) -> tuple[str, str]:
    a, b = rng.choice(len(_NAMES), size=2, replace=False).tolist()
    return _NAMES[a], _NAMES[b]


def _r(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An integer in [lo, hi]."""
    return int(rng.integers(lo, hi + 1))


# ---------------------------------------------------------------------------- level 1
def _l1_buy(rng: np.random.Generator) -> tuple[str, int]:
    name, item, a, b = _pick(rng, _NAMES), _pick(rng, _ITEMS), _r(rng, 3, 60), _r(rng, 2, 40)
    return f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?", a + b


def _l1_give(rng: np.random.Generator) -> tuple[str, int]:
    (name, friend), item = _two_names(rng), _pick(rng, _ITEMS)
    b = _r(rng, 2, 30)
    a = b + _r(rng, 1, 50)
    return (f"{name} had {a} {item} and gave {b} of them to {friend}. How many {item} does "
            f"{name} have left?", a - b)


def _l1_bus(rng: np.random.Generator) -> tuple[str, int]:
    a, b = _r(rng, 10, 45), _r(rng, 2, 9)
    return (f"A bus has {a} passengers. At the next stop {b} passengers get off and nobody "
            "gets on. How many passengers are on the bus now?", a - b)


# ---------------------------------------------------------------------------- level 2
def _l2_packs(rng: np.random.Generator) -> tuple[str, int]:
    name, item, a, b = _pick(rng, _NAMES), _pick(rng, _ITEMS), _r(rng, 2, 12), _r(rng, 3, 15)
    return (f"{name} buys {a} packs of {item}. Each pack holds {b} {item}. How many {item} "
            f"does {name} buy?", a * b)


def _l2_share(rng: np.random.Generator) -> tuple[str, int]:
    item, each, k = _pick(rng, _ITEMS), _r(rng, 2, 15), _r(rng, 2, 9)
    return (f"{each * k} {item} are shared equally among {k} friends. How many {item} does "
            "each friend get?", each)


def _l2_speed(rng: np.random.Generator) -> tuple[str, int]:
    v, t = 5 * _r(rng, 6, 24), _r(rng, 2, 7)
    return f"A car drives at {v} km per hour for {t} hours. How many km does it travel?", v * t


# ---------------------------------------------------------------------------- level 3
def _l3_change(rng: np.random.Generator) -> tuple[str, int]:
    name, a, p = _pick(rng, _NAMES), _r(rng, 2, 9), _r(rng, 2, 9)
    bill = 10 * (a * p // 10 + _r(rng, 1, 3))
    return (f"{name} buys {a} notebooks that cost ${p} each and pays with ${bill}. How many "
            "dollars of change does "
            f"{name} get back?", bill - a * p)


def _l3_orchard(rng: np.random.Generator) -> tuple[str, int]:
    a, b, c = _r(rng, 3, 12), _r(rng, 4, 15), _r(rng, 5, 40)
    return (f"A farmer has {a} rows of apple trees with {b} trees in each row, and plants {c} "
            "more trees. How many apple trees does the farmer have now?", a * b + c)


def _l3_reading(rng: np.random.Generator) -> tuple[str, int]:
    name, a, d, rest = _pick(rng, _NAMES), _r(rng, 8, 30), _r(rng, 3, 9), _r(rng, 5, 60)
    total = a * d + rest
    return (f"A book has {total} pages. {name} reads {a} pages a day for {d} days. How many "
            "pages are left to read?", rest)


# ---------------------------------------------------------------------------- level 4
def _l4_bakery(rng: np.random.Generator) -> tuple[str, int]:
    a, b = _r(rng, 3, 10), _r(rng, 6, 12)
    c = _r(rng, 4, a * b - 4)
    c -= (a * b - c) % 2  # an even remainder halves exactly
    left = (a * b - c) // 2
    return (f"A bakery bakes {a} trays of {b} muffins. It sells {c} muffins in the morning and "
            "half of the remaining muffins in the afternoon. How many muffins are left?", left)


def _l4_wages(rng: np.random.Generator) -> tuple[str, int]:
    name, w, h, d = _pick(rng, _NAMES), _r(rng, 8, 25), _r(rng, 3, 8), _r(rng, 3, 6)
    s = _r(rng, 10, w * h * d - 10)
    return (f"{name} earns ${w} an hour and works {h} hours a day for {d} days, then spends "
            f"${s} on groceries. How many dollars does {name} have left from the pay?",
            w * h * d - s)


def _l4_tickets(rng: np.random.Generator) -> tuple[str, int]:
    a, c, x, y = _r(rng, 8, 20), _r(rng, 3, 7), _r(rng, 2, 5), _r(rng, 2, 6)
    cost = a * x + c * y
    bill = 50 * (cost // 50 + 1)
    return (f"Museum tickets cost ${a} for an adult and ${c} for a child. A group of {x} adults "
            f"and {y} children pays with ${bill}. How many dollars of change does the group "
            "get?", bill - cost)


# ---------------------------------------------------------------------------- level 5
def _l5_sale(rng: np.random.Generator) -> tuple[str, int]:
    name, d = _pick(rng, _NAMES), int(rng.choice([10, 20, 25, 50]))
    p = (100 // np.gcd(100, d)) * _r(rng, 1, 12)
    while p * (100 - d) // 100 <= 10:
        p *= 2
    sale = p * (100 - d) // 100
    coupon, k = _r(rng, 1, min(10, sale - 1)), _r(rng, 2, 4)
    return (f"A jacket costs ${p}. In a sale it is {d}% off, and then a ${coupon} coupon is "
            f"taken off the sale price of each jacket. {name} buys {k} jackets this way. How "
            "many dollars does "
            f"{name} pay in total?", k * (sale - coupon))


def _l5_tank(rng: np.random.Generator) -> tuple[str, int]:
    r2 = _r(rng, 1, 6)
    r1 = r2 + _r(rng, 1, 6)
    t = _r(rng, 4, 30)
    return (f"An empty tank holds {(r1 - r2) * t} liters. A pipe fills it at {r1} liters per "
            f"minute while a leak drains {r2} liters per minute. How many minutes does it take "
            "to fill the tank?", t)


def _l5_savings(rng: np.random.Generator) -> tuple[str, int]:
    name, a, b, w = _pick(rng, _NAMES), _r(rng, 2, 20), _r(rng, 1, 6), _r(rng, 3, 8)
    total = w * a + b * w * (w - 1) // 2
    return (f"{name} saves ${a} in the first week and each week saves ${b} more than the week "
            f"before. How many dollars has {name} saved after {w} weeks?", total)


def _l5_trains(rng: np.random.Generator) -> tuple[str, int]:
    v1, h = 10 * _r(rng, 4, 8), _r(rng, 1, 3)
    dv = int(rng.choice([10, 20, 40]))
    while (v1 * h) % dv:
        dv //= 2
    v2 = v1 + dv
    return (f"A train leaves a station at {v1} km per hour. {h} hours later a second train "
            f"leaves the same station on the same track at {v2} km per hour. How many hours "
            "after it leaves does the second train catch up with the first?", v1 * h // dv)


TEMPLATES: tuple[tuple[Template, ...], ...] = (
    (_l1_buy, _l1_give, _l1_bus),
    (_l2_packs, _l2_share, _l2_speed),
    (_l3_change, _l3_orchard, _l3_reading),
    (_l4_bakery, _l4_wages, _l4_tickets),
    (_l5_sale, _l5_tank, _l5_savings, _l5_trains),
)


def generate(seed: int = SHIPPED_SEED, num_per_level: int = SHIPPED_PER_LEVEL) -> list[MathProblem]:
    """``NUM_LEVELS * num_per_level`` problems, interleaved by level, ids ``math-0000``...

    Deterministic in ``(seed, num_per_level)``: each problem draws from its own generator
    ``default_rng([seed, index])`` and cycles through its level's templates. A question that
    repeats an earlier one is redrawn, so the questions are distinct."""
    if num_per_level < 1:
        raise ConfigError(f"num_per_level must be >= 1, got {num_per_level}")
    out: list[MathProblem] = []
    seen: set[str] = set()
    for i in range(NUM_LEVELS * num_per_level):
        level = i % NUM_LEVELS + 1
        templates = TEMPLATES[level - 1]
        template = templates[(i // NUM_LEVELS) % len(templates)]
        rng = np.random.default_rng([seed, i])
        for _ in range(100):
            question, answer = template(rng)
            if question not in seen:
                break
        else:  # pragma: no cover - the templates have far more than 100 distinct draws
            raise ConfigError(f"problem {i}: no new question after 100 draws")
        seen.add(question)
        out.append(MathProblem(f"math-{i:04d}", level, question, int(answer)))
    return out


def write_problems(problems: Sequence[MathProblem], path: str | Path) -> None:
    """Write problems as JSONL (one ``MathProblem.to_dict`` per line)."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for p in problems:
            fh.write(json.dumps(p.to_dict(), ensure_ascii=False) + "\n")


_ANSWER_RE = re.compile(r"answer\s*(?:is)?\s*[:=]?\s*\**\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)", re.I)
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_answer(text: str) -> float | None:
    """The number after the last ``Answer:`` (also ``answer is``), else the last number in
    ``text``; None when it has no number. Thousands separators are accepted."""
    marked = _ANSWER_RE.findall(text)
    found = marked[-1] if marked else (_NUMBER_RE.findall(text) or [None])[-1]
    if found is None:
        return None
    try:
        return float(found.replace(",", ""))
    except ValueError:
        return None


def check_answer(text: str, answer: float) -> bool:
    """True when ``extract_answer(text)`` equals ``answer`` (relative tolerance 1e-9)."""
    got = extract_answer(text)
    return got is not None and abs(got - answer) <= 1e-9 * max(1.0, abs(answer))
