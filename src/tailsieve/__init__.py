"""TailSieve: partial-rollout-guided tail routing for synchronous LLM rollouts."""

__version__ = "0.1.0"
