"""The ``tailsieve`` command line. Each sub-command lives in its own module and registers
itself on the app; this module only wires them and turns ``TailSieveError`` into a one-line
message with a non-zero exit code."""

from __future__ import annotations

import sys

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

    for module in (
        profiles_cmd,
        oracle_cmd,
        trace_cmd,
        trace_turns_cmd,
        simulate_cmd,
        runtime_cmd,
        emulate_cmd,
        profile_cmd,
        demo_cmd,
        report_cmd,
        record_cmd,
        acceptance_cmd,
        agentic_cmd,
        serve_cmd,
    ):
        module.register(app)


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
