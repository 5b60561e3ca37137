"""Issue 11's must-show items on the grounded GPU profiles (``qwen3-4b-h100`` ...).

Each module has ``run(out_dir: Path, quick: bool, **tiny) -> dict`` writing ``<name>.json`` and
``<name>.png`` under ``out_dir``; ``benchmarks/grounded_suite.py`` runs them and writes the
markdown section ``grounded.md`` (embedded in ``benchmarks/results/REPORT.md``). Numbers use the paired
statistic of ``tailsieve.sim.speedup_stats``.
"""
