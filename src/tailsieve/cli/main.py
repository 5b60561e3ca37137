"""The ``tailsieve`` command line. Each sub-command lives in its own module; this module only
wires them onto the app and turns ``TailSieveError`` into a one-line message with a non-zero
exit code."""

from __future__ import annotations

import sys
from typing import Any

import typer

from tailsieve.errors import TailSieveError

app = typer.Typer(
    name="tailsieve",
    help="Partial-rollout-guided tail routing for synchronous LLM rollouts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _register_all() -> None:
    from tailsieve.cli import (
        acceptance_cmd,
        agentic_cmd,
        demo_cmd,
        emulate_cmd,
        oracle_cmd,
        profile_cmd,
        profiles_cmd,
        record_cmd,
        report_cmd,
        runtime_cmd,
        serve_cmd,
        simulate_cmd,
        trace_cmd,
        trace_turns_cmd,
    )

    commands: tuple[tuple[str, Any], ...] = (  # in the order of --help
        ("profiles", profiles_cmd.profiles_app),
        ("oracle", oracle_cmd.oracle),
        ("oracle-sweep", oracle_cmd.oracle_sweep),
        ("trace", trace_cmd.trace_app),
        ("simulate", simulate_cmd.simulate),
        ("launch", runtime_cmd.launch),
        ("rollout", runtime_cmd.rollout),
        ("emulate", emulate_cmd.emulate),
        ("profile", profile_cmd.profile),
        ("demo", demo_cmd.demo),
        ("report", report_cmd.report),
        ("record", record_cmd.record_app),
        ("acceptance", acceptance_cmd.acceptance_app),
        ("agentic", agentic_cmd.agentic_app),
        ("serve", serve_cmd.serve),
    )
    for name, target in commands:
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    trace_cmd.trace_app.command("turns")(trace_turns_cmd.turns)
    trace_cmd.trace_app.command("agentic")(trace_turns_cmd.agentic)


@app.callback()
def _root() -> None:
    """Partial-rollout-guided tail routing for synchronous LLM rollouts."""


_register_all()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: usage errors exit 2 (click), ``TailSieveError`` exits 2
    with one line on stderr, never a traceback. The commands check their file arguments up
    front (``cli.checks``); a file-system error that still gets here (a file removed meanwhile)
    is reported the same way."""
    try:
        app(args=argv)
    except TailSieveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:  # not about a file (a socket, ...): a real failure
            raise
        print(f"error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # click ends every run with SystemExit
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
