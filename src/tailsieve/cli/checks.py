"""Checks of the CLI's file arguments, run before any replica is contacted or any output is
written: a missing file, a folder given for a file, an unreadable or malformed file is a
``ConfigError`` naming the flag and the path (one ``error:`` line, exit 2)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from tailsieve.core.training_step import check_rollout_share
from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import PromptInput
from tailsieve.runtime.prompt_file import parse_prompts


def input_file(path: Path, flag: str) -> Path:
    """``path`` if it is a readable file; else ``ConfigError`` saying what it is instead."""
    if not path.exists():
        raise ConfigError(f"{flag} {path}: no such file")
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder, not a file")
    try:
        with path.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    return path


def read_text(path: Path, flag: str) -> str:
    """The whole text of ``input_file(path)`` (UTF-8)."""
    try:
        return input_file(path, flag).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{flag} {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None


def json_error(where: str, line: int, exc: json.JSONDecodeError) -> ConfigError:
    """``where:line: not JSON: <json's message>: line L column C`` (L: the file's line)."""
    return ConfigError(f"{where}:{line}: not JSON: {exc.msg}: line {line} column {exc.colno}")


def read_prompts(path: Path, flag: str = "--prompts") -> list[PromptInput]:
    """Every prompt of a JSONL prompt file, validated whole before anything runs: each
    non-blank line one object ``{prompt_id, prompt | prompt_token_ids | messages}``, ids unique,
    at least one prompt. Errors name ``file:line``."""
    return parse_prompts(read_text(path, flag), path, json_error, f"{flag} {path}")[0]


def state_endpoints(path: Path, flag: str = "--state") -> list[str]:
    """The ``endpoints`` of a launch state file (a JSON object with a non-empty list; entries
    are taken as ``StateFileAddresses`` takes them)."""
    text = read_text(path, flag)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{flag} {path}: not a launch state file (not JSON: {exc.msg}: line {exc.lineno} "
            f"column {exc.colno})"
        ) from None
    urls = data.get("endpoints") if isinstance(data, dict) else None
    if not isinstance(urls, list) or not urls:
        raise ConfigError(
            f"{flag} {path}: not a launch state file (no 'endpoints' list of URLs)"
        )
    return [str(u) for u in urls]


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def output_dir(path: Path, flag: str = "--out") -> Path:
    """``path`` if it is a folder, or can be made one (nothing on the way is a file and the
    first existing folder above it is writable). Creates nothing."""
    if path.exists():
        if not path.is_dir():
            raise ConfigError(f"{flag} {path}: exists and is not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"{flag} {path}: the folder is not writable")
        return path
    base = _existing_ancestor(path)
    if not base.is_dir():
        raise ConfigError(f"{flag} {path}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot create it ({base} is not writable)")
    return path


def output_file(path: Path, flag: str) -> Path:
    """``path`` if a file can be written there: not a folder, its folder exists and is
    writable (an existing file must be writable). Creates nothing."""
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder, not a file")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: no such folder {path.parent}")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{flag} {path}: the file is not writable")
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot create it ({path.parent} is not writable)")
    return path


def tcp_port(port: int, flag: str) -> int:
    """``port`` if it is a valid TCP port number (1..65535)."""
    if not 1 <= port <= 65535:
        raise ConfigError(f"{flag} must be in 1..65535, got {port}")
    return port


def output_files(*pairs: tuple[Path | None, str]) -> None:
    """``output_file`` for each ``(path, flag)`` whose path is given."""
    for path, flag in pairs:
        if path is not None:
            output_file(path, flag)


ROLLOUT_SHARE_HELP = (
    "The rollout's share of a training step, in (0, 1]: every rollout speedup is printed with "
    "the training step's, 1 / ((1 - share) + share / speedup). Default 0.7, the share verl "
    "reports for DAPO on a 32B model (docs/training-step.md).")
RolloutShare = Annotated[float, typer.Option("--rollout-share", help=ROLLOUT_SHARE_HELP)]


def rollout_share(share: float, flag: str = "--rollout-share") -> float:
    """``share`` if it is in (0, 1] (``core.training_step.check_rollout_share``); else
    ``ConfigError`` naming the flag."""
    try:
        return check_rollout_share(share)
    except ConfigError:
        raise ConfigError(f"{flag} must be in (0, 1] (the rollout's share of a training step), "
                          f"got {share}") from None
