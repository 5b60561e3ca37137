"""TailSieve inside verl 0.9.1 (``pip install tailsieve[verl]``); see docs/integrations-verl.md.

- ``router.TailSieveRouter``: verl's request router, switched on by one YAML
  (``router_class: tailsieve.integrations.verl.router.TailSieveRouter``) and one override
  (``actor_rollout_ref.rollout.router_config_path=...``) on verl's own entry point.
- ``TailSieveAgentLoopManager``: ``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=
  tailsieve.integrations.verl.TailSieveAgentLoopManager``.
- ``TailSieveRayPPOTrainer``: accepts the manager's batch as authoritative, feeds it
  ``num_fresh_needed()`` prompts per step and checkpoints TailSieve's state.
- ``python -m tailsieve.integrations.verl.main``: verl's PPO entry point with that trainer.

Importing this package imports verl; ``import tailsieve`` does not.
"""

from tailsieve.integrations.verl.manager import TailSieveAgentLoopManager
from tailsieve.integrations.verl.settings import VerlSettings
from tailsieve.integrations.verl.trainer import TailSieveRayPPOTrainer, adopt_generated_batch

__all__ = [
    "TailSieveAgentLoopManager",
    "TailSieveRayPPOTrainer",
    "VerlSettings",
    "adopt_generated_batch",
]
