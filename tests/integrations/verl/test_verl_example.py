"""The worked example config (examples/verl/config/tailsieve_grpo.yaml) composes with verl's
real Hydra config and switches TailSieve on."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

from hydra import compose, initialize_config_dir

from tailsieve.errors import ConfigError
from tailsieve.integrations.verl import VerlSettings
from tailsieve.integrations.verl.main import MANAGER, check_config
from tailsieve.runtime.backends import Backend

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl" / "config"


def test_example_config_composes() -> None:
    """With the run script's batch flags, verl's own validate_config accepts it too."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    flags = [
        "actor_rollout_ref.model.path=m",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "trainer.n_gpus_per_node=8",
    ]
    with initialize_config_dir(config_dir=str(EXAMPLE), version_base=None):
        cfg = compose(config_name="tailsieve_grpo", overrides=flags)
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class == MANAGER
    check_config(cfg)
    validate_config(
        cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg)
    )
    s = VerlSettings.from_verl(cfg)
    assert (s.num_groups, s.group_size, s.backend) == (64, 8, Backend.VLLM)
    assert (s.prompt_length, s.response_length, s.endpoints) == (1024, 4096, ())
    assert s.rollout_config("m").sampling.logprobs == 0


def test_bad_settings_are_named() -> None:
    with initialize_config_dir(config_dir=str(EXAMPLE), version_base=None):
        cfg = compose(config_name="tailsieve_grpo", overrides=["+tailsieve.bogus=1"])
        with pytest.raises(ConfigError, match="bogus"):
            VerlSettings.from_verl(cfg)
        cfg = compose(config_name="tailsieve_grpo", overrides=["trainer.use_v1=true"])
        with pytest.raises(ConfigError, match="use_v1"):
            check_config(cfg)


def run_python(*args: str) -> str:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-W", "ignore", *args], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_entry_point_composes_the_example() -> None:
    """``python -m tailsieve.integrations.verl.main`` with the example config (``--cfg job``
    prints the composed config and stops before Ray starts)."""
    text = run_python(
        "-m",
        "tailsieve.integrations.verl.main",
        "--config-path",
        str(EXAMPLE),
        "--config-name",
        "tailsieve_grpo",
        "--cfg",
        "job",
    )
    assert f"agent_loop_manager_class: {MANAGER}" in text
    assert "tailsieve:" in text and "num_groups: 64" in text


def test_task_runner_builds_the_subclass() -> None:
    """In the task-runner process verl's v0 runner builds TailSieveRayPPOTrainer (checked in
    a subprocess: the binding is process-wide by design)."""
    code = (
        "import verl.trainer.main_ppo_v0 as v0\n"
        "from tailsieve.integrations.verl.main import bind_trainer\n"
        "from tailsieve.integrations.verl import TailSieveRayPPOTrainer\n"
        "cls = bind_trainer()\n"
        "assert v0.RayPPOTrainer is TailSieveRayPPOTrainer and callable(cls.run)\n"
        "print('ok')\n"
    )
    assert run_python("-c", code).strip().endswith("ok")
