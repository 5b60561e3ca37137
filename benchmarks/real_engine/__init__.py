"""Pieces of ``benchmarks/bench_real_engine.py``: servers, profiles, interleaved live steps,
the simulator's prediction and the markdown report."""
