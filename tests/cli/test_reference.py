"""The CLI reference of the docs is rendered from the commands themselves."""

from __future__ import annotations

from tailsieve.cli.reference import command_paths, help_text, reference_markdown


def test_every_command_and_subcommand_is_listed() -> None:
    paths = command_paths()
    assert () in paths and ("rollout",) in paths and ("trace", "capture") in paths
    assert {"demo", "simulate", "oracle", "oracle-sweep", "emulate", "profile", "profiles",
            "launch", "report", "trace"} <= {p[0] for p in paths if p}


def test_help_pages_carry_the_options_from_the_code() -> None:
    text = help_text(("rollout",))
    assert "Usage: tailsieve rollout" in text
    for opt in ("--endpoints", "--model", "--replay-trace", "--q0", "--policy"):
        assert opt in text
    assert "Served model name" in text  # the --model help string, written once in the code
    md = reference_markdown()
    assert md.count("```text") == len(command_paths())
    assert "## `tailsieve trace transform`" in md
