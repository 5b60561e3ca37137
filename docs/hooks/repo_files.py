"""MkDocs hooks.

* ``on_files``: publish a few repository files that live outside ``docs/`` (BENCHMARKS.md, the
  figures it shows and the integration examples) under their repository paths, so the site renders them as they are,
  without a second copy to keep in step.
* ``on_page_markdown``: replace the CLI-reference placeholder with the ``--help`` page of every
  command, rendered from the commands themselves (``tailsieve.cli.reference``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
REPO_FILES = ("BENCHMARKS.md", "benchmarks/results/REPORT.md", "benchmarks/results/paper/*.png",
              "benchmarks/results/grounded/*.png", "examples/*/*", "examples/*/*/*")


def on_files(files: Files, config: Any) -> Files:
    for pattern in REPO_FILES:
        for path in sorted(p for p in ROOT.glob(pattern) if p.is_file()):
            rel = path.relative_to(ROOT).as_posix()
            if files.get_file_from_path(rel) is None:
                files.append(
                    File(rel, str(ROOT), config["site_dir"], config["use_directory_urls"])
                )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    from tailsieve.cli.reference import PLACEHOLDER, reference_markdown

    if PLACEHOLDER in markdown:
        return markdown.replace(PLACEHOLDER, reference_markdown())
    return markdown
