"""The CLI reference in Markdown, rendered from the commands themselves: the ``--help`` page
of every command and sub-command, exactly as a user sees it. The docs site builds its CLI page
from this at build time (``docs/hooks/repo_files.py``), so option help is written once, in the
code."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from tailsieve.cli.main import app

PLACEHOLDER = "<!-- tailsieve-cli-reference -->"
HELP_COLUMNS = 100


def command_paths() -> list[tuple[str, ...]]:
    """Every command path, depth first: ``()`` (the root), ``("demo",)``, ``("trace", "stats")``..."""
    paths: list[tuple[str, ...]] = []

    def walk(cmd: object, path: tuple[str, ...]) -> None:
        paths.append(path)
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return paths


def help_text(path: tuple[str, ...]) -> str:
    """``tailsieve PATH --help`` as plain text (no colour, fixed width)."""
    env = {"COLUMNS": str(HELP_COLUMNS), "TERM": "dumb", "NO_COLOR": "1"}
    result = CliRunner().invoke(app, [*path, "--help"], env=env, color=False)
    if result.exit_code != 0:
        raise RuntimeError(f"tailsieve {' '.join(path)} --help failed: {result.output}")
    lines = [line.rstrip() for line in result.output.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines).rstrip() + "\n"


def reference_markdown() -> str:
    """One section per command: a heading ``tailsieve PATH`` and its help in a text block."""
    parts = []
    for path in command_paths():
        name = " ".join(("tailsieve", *path))
        parts.append(f"## `{name}`\n\n```text\n{help_text(path)}```\n")
    return "\n".join(parts)
