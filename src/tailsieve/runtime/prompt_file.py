"""Prompt files (for the recorder and the real-model demo): JSONL, one ``{prompt_id, prompt | prompt_token_ids |
messages[, answer, level, seed]}`` per line; ``math`` names the shipped math word problems."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.workload.shipped import SHIPPED_PROMPTS

SHIPPED_PROMPT_SETS: dict[str, Path] = {"math": SHIPPED_PROMPTS}


@dataclass(frozen=True, slots=True)
class PromptSet:
    """Prompts in file order and the reference answers of those that have one."""

    prompts: tuple[PromptInput, ...]
    answers: dict[str, float]
    source: str

    def head(self, num_prompts: int | None) -> PromptSet:
        """The first ``num_prompts`` prompts (all when None)."""
        if num_prompts is None:
            return self
        if not 1 <= num_prompts <= len(self.prompts):
            raise ConfigError(
                f"{self.source}: --num-prompts {num_prompts} outside 1..{len(self.prompts)}"
            )
        kept = self.prompts[:num_prompts]
        ids = {p.prompt_id for p in kept}
        return PromptSet(kept, {k: v for k, v in self.answers.items() if k in ids}, self.source)


def resolve_prompt_path(name_or_path: str | Path) -> Path:
    """``name_or_path`` itself, or the shipped prompt set it names (``math``) when no such
    file exists."""
    p = Path(name_or_path)
    if not p.exists() and str(name_or_path) in SHIPPED_PROMPT_SETS:
        return SHIPPED_PROMPT_SETS[str(name_or_path)]
    return p


def read_prompt_set(name_or_path: str | Path) -> PromptSet:
    """Read and validate a whole prompt file (errors name ``file:line`` and the field)."""
    path = resolve_prompt_path(name_or_path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such prompt file (or a shipped set: math)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    prompts, answers = parse_prompts(text, path)
    return PromptSet(tuple(prompts), answers, str(path))


def _malformed(where: str, line: int, exc: json.JSONDecodeError) -> ConfigError:
    return ConfigError(f"{where}:{line}: malformed JSON ({exc.msg}, column {exc.colno})")


def parse_prompts(
    text: str, path: str | Path, bad_json: Callable[[str, int, json.JSONDecodeError],
                                                    ConfigError] = _malformed, label: str = "",
) -> tuple[list[PromptInput], dict[str, float]]:
    """The prompts of a prompt file's ``text`` and the answers of those that have one; every
    error names ``path:line`` (``bad_json`` words a line that is not JSON; ``label``, default
    the path, names the file in "no prompts")."""
    prompts: list[PromptInput] = []
    answers: dict[str, float] = {}
    first: dict[str, int] = {}
    for ln, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}:{ln}"
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise bad_json(str(path), ln, exc) from None
        if not isinstance(row, dict):
            raise ConfigError(f"{where}: expected a JSON object, got {type(row).__name__}")
        try:
            prompt = PromptInput.from_dict(row, where)
        except ConfigError as exc:
            msg = str(exc)
            raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{where}: bad prompt fields ({exc})") from None
        if prompt.prompt_id in first:
            raise ConfigError(
                f"{where}: prompt_id {prompt.prompt_id!r} repeats line {first[prompt.prompt_id]}"
            )
        first[prompt.prompt_id] = ln
        if "answer" in row:
            answers[prompt.prompt_id] = _answer(row["answer"], where)
        prompts.append(prompt)
    if not prompts:
        raise ConfigError(f"{label or path}: no prompts (the file has no non-blank line)")
    return prompts, answers


def _answer(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: field 'answer': expected a finite number, got {value!r:.40}")
    return float(value)
