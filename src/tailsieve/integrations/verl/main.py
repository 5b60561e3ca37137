"""verl's PPO entry point with ``TailSieveRayPPOTrainer``::

    python -m tailsieve.integrations.verl.main [verl overrides...] \\
        +actor_rollout_ref.rollout.agent.agent_loop_manager_class=\\
    tailsieve.integrations.verl.TailSieveAgentLoopManager +tailsieve.num_groups=64

It is ``python -m verl.trainer.main_ppo`` (same Hydra config, ``trainer.use_v1=False``, whose
task runner builds ``RayPPOTrainer``) except that the task runner actor builds
``TailSieveRayPPOTrainer``: inside that actor process only, the name ``RayPPOTrainer`` in
``verl.trainer.main_ppo_v0`` is bound to the subclass before verl's own ``TaskRunner.run`` runs.
"""

from __future__ import annotations

from typing import Any

import hydra
import ray
from verl.trainer import main_ppo

from tailsieve.errors import ConfigError

MANAGER = "tailsieve.integrations.verl.TailSieveAgentLoopManager"


def bind_trainer() -> Any:
    """In this process, make verl's v0 task runner build ``TailSieveRayPPOTrainer``; returns
    verl's (undecorated) ``TaskRunner`` class."""
    import verl.trainer.main_ppo_v0 as v0

    from tailsieve.integrations.verl.trainer import TailSieveRayPPOTrainer

    v0.RayPPOTrainer = TailSieveRayPPOTrainer
    return v0.TaskRunner.__ray_actor_class__


@ray.remote(num_cpus=1)
class TailSieveTaskRunner:
    """verl's v0 ``TaskRunner`` with ``TailSieveRayPPOTrainer`` (a Ray actor, as verl's is)."""

    def run(self, config: Any) -> None:
        bind_trainer()().run(config)


def check_config(config: Any) -> None:
    """TailSieve needs the v0 trainer and its agent-loop manager."""
    if config.trainer.get("use_v1", False):
        raise ConfigError("TailSieve runs with trainer.use_v1=False (verl's RayPPOTrainer)")
    manager = config.actor_rollout_ref.rollout.get("agent", {}).get("agent_loop_manager_class")
    if manager != MANAGER:
        raise ConfigError(
            f"set +actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER}"
        )


@hydra.main(
    config_path=main_ppo.__file__.rsplit("/", 1)[0] + "/config",
    config_name="ppo_trainer",
    version_base=None,
)
def main(config: Any) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    check_config(config)
    validate_config(
        config=config,
        use_reference_policy=need_reference_policy(config),
        use_critic=need_critic(config),
    )
    main_ppo.run_ppo(config, task_runner_class=TailSieveTaskRunner)


if __name__ == "__main__":
    main()
