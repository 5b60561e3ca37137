"""The single-turn step front door: ``TailSieveRollout`` and its settings, the live executor that
runs a ``StepPlan`` (cutoff, carried prompts, tail pool) and its rebalancer.
"""
