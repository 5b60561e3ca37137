"""Paper-reproduction benchmark suite (issue 6 item 3): one module per figure or table.

Each module has ``run(out_dir: Path, quick: bool) -> dict`` that writes ``<name>.json`` and
``<name>.png`` under ``out_dir`` and returns the JSON payload. ``benchmarks/run_all.py`` runs
them all and ``paper.report`` writes the report.
"""
