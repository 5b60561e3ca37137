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
from tailsieve.runtime.engine.backends import Backend

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


def _shipped(*overrides: str, backend: str = "vllm") -> object:
    """verl's own shipped ``ppo_trainer`` config (no ``tailsieve`` section of its own)."""
    import verl

    cfg_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=[
            "actor_rollout_ref.model.path=m", "data.train_batch_size=16",
            f"actor_rollout_ref.rollout.name={backend}", *overrides])


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_moves_by_default_on_vllm_and_sglang(backend: str) -> None:
    """No move key anywhere: the training rollout moves (continuation, the controller
    balances); vLLM without streaming in pieces of 512, SGLang in one piece until moved."""
    s = VerlSettings.from_verl(_shipped(backend=backend))
    assert s.moves and s.policy == "tailsieve"
    rc = s.rollout_config("m")
    assert rc.moves_active and rc.continuation
    assert rc.piece_tokens == (512 if backend == "vllm" else None)
    # validation rollouts (policy uniform) never move
    assert not s.rollout_config("m", policy="uniform").moves_active


def test_move_keys_with_the_override_syntax_the_docs_give() -> None:
    """``++tailsieve.KEY=VALUE`` works on verl's shipped config (the key is new) and on the
    example config (the key exists)."""
    for cfg in (
        _shipped("++tailsieve.moves=false"),
        _compose_example("++tailsieve.moves=false"),
    ):
        rc = VerlSettings.from_verl(cfg).rollout_config("m")
        assert not rc.moves_active and rc.moves_off_reason == "moves=False"
        assert rc.continuation is False and rc.piece_tokens is None
    s = VerlSettings.from_verl(_shipped(
        "++tailsieve.stream=true", "++tailsieve.stream_interval=64", "++tailsieve.seam_s=0.01",
        "++tailsieve.policy=uniform-requests"))
    assert (s.stream, s.stream_interval, s.seam_s, s.policy) == (True, 64, 0.01,
                                                                 "uniform-requests")
    rc = s.rollout_config("m")
    assert rc.stream_interval == 64 and rc.controller["seam_s"] == 0.01
    assert not rc.moves_active  # uniform-requests: the round-robin baseline
    rc = VerlSettings.from_verl(_shipped("++tailsieve.piece_tokens=256")).rollout_config("m")
    assert rc.piece_tokens == 256 and rc.moves_active


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("++tailsieve.moves=maybe", "tailsieve.moves must be true or false"),
        ("++tailsieve.piece_tokens=0", "tailsieve.piece_tokens must be >= 1"),
        ("++tailsieve.stream_interval=64", "needs tailsieve.stream=true"),
        ("++tailsieve.seam_s=-1", "tailsieve.seam_s must be >= 0"),
        ("++tailsieve.policy=round-robin", "tailsieve.policy must be one of"),
    ],
)
def test_bad_move_keys_are_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        VerlSettings.from_verl(_shipped(override))


def _compose_example(*overrides: str) -> object:
    with initialize_config_dir(config_dir=str(EXAMPLE), version_base=None):
        return compose(config_name="tailsieve_grpo", overrides=list(overrides))
