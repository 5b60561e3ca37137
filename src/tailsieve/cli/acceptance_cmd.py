"""``tailsieve acceptance``: measure draft acceptance per draft source on a recorded trace.

``measure`` replays a recorded trace (token ids) against every draft source and prints the table
(tau per source and k, acceptance per drafted token, tau by position); ``--out DIR`` writes
``acceptance.json``, ``acceptance.md`` and ``acceptance-<name>.json`` (the sources the
simulator reads, each with its placement: the form the throughput model's acceptance presets
are read in). ``list`` names the draft sources.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tailsieve.errors import ConfigError

acceptance_app = typer.Typer(
    name="acceptance",
    help="Draft acceptance per draft source, measured on a recorded trace.",
    no_args_is_help=True,
)


@acceptance_app.command("list")
def list_sources() -> None:
    """The draft sources and whether they depend on k (co-located responses in the lockstep
    replays; 1 + complete siblings in the server's tree for suffix-siblings)."""
    from tailsieve.drafts.measure import SOURCE_HELP, SOURCES

    for name, make in SOURCES.items():
        k = "per k" if make().depends_on_k else "any k"
        print(f"{name:16s} {k:6s} {SOURCE_HELP[name]}")


@acceptance_app.command("measure")
def measure(
    trace: Annotated[str, typer.Option(
        "--trace", help="Recorded trace with token ids (a file, or smollm2-math, shipped).")
    ] = "smollm2-math",
    max_spec_tokens: Annotated[int, typer.Option(
        "--max-spec-tokens", help="Draft depth d (vLLM num_speculative_tokens).")] = 8,
    source: Annotated[list[str] | None, typer.Option(
        "--source", help="Draft source (repeat; default all, see `acceptance list`).")] = None,
    k: Annotated[list[int] | None, typer.Option(
        "--k", help="k (repeat; default 1 2 4 8): co-located responses for suffix-running / "
                    "suffix-finished, 1 + complete siblings for suffix-siblings.")] = None,
    prompt_ids: Annotated[Path | None, typer.Option(
        "--prompt-ids", help="JSON {prompt_id: [token ids]} of the prompts (default: shipped "
                             "for smollm2-math; else none: prompt lookup sees only responses).")
    ] = None,
    max_prompts: Annotated[int | None, typer.Option(
        "--max-prompts", help="Replay only the first N prompts (a quick look).")] = None,
    workers: Annotated[int, typer.Option("--workers", help="Processes.")] = 1,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Folder for acceptance.json, acceptance.md, acceptance-<name>.json.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Replay every recorded response verify step by verify step (exact match: n-gram and
    suffix drafts are one-hot in vLLM's rejection sampler) and report tokens per verify step."""
    from tailsieve.cli import checks
    from tailsieve.drafts import DraftConfig, measure_acceptance
    from tailsieve.drafts.measure import K_VALUES

    if max_spec_tokens < 1:
        raise ConfigError(f"--max-spec-tokens must be >= 1, got {max_spec_tokens}")
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    if max_prompts is not None and max_prompts < 1:
        raise ConfigError(f"--max-prompts must be >= 1, got {max_prompts}")
    if prompt_ids is not None:
        checks.input_file(prompt_ids, "--prompt-ids")
    if out is not None and out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, not a folder")
    try:
        table = measure_acceptance(
            trace, config=DraftConfig(max_spec_tokens=max_spec_tokens), sources=source or None,
            k_values=k or K_VALUES, prompt_ids=prompt_ids, max_prompts=max_prompts,
            workers=workers, provenance={"command": _command()})
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "acceptance.json").write_text(json.dumps(table.to_dict(), indent=1) + "\n")
        (out / "acceptance.md").write_text(table.to_markdown())
        (out / f"acceptance-{table.name}.json").write_text(
            json.dumps(table.to_package_dict(), indent=1) + "\n")
    print(json.dumps(table.to_dict(), indent=1) if as_json else table.to_markdown(), end="")


def _command() -> str:
    import sys

    return "tailsieve " + " ".join(sys.argv[1:]) if sys.argv else "tailsieve acceptance measure"
