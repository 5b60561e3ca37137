"""Adapters that switch TailSieve on inside RL frameworks by config.

- ``tailsieve.integrations.verl``: an agent-loop manager and trainer for verl 0.9.1
  (needs ``pip install tailsieve[verl]``).
- ``tailsieve.integrations.slime``: a rollout function and data source for slime.

Neither framework is imported by ``import tailsieve``; each adapter imports its framework when
it is itself imported.
"""
