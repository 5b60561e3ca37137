#!/usr/bin/env bash
# GRPO on GSM8K with verl 0.9.1 and TailSieve (pip install "tailsieve[verl]").
# Data: verl's examples/data_preprocess/gsm8k.py writes ~/data/gsm8k/{train,test}.parquet.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

python -m tailsieve.integrations.verl.main \
    --config-path "$HERE/config" --config-name tailsieve_grpo \
    data.train_files="$HOME/data/gsm8k/train.parquet" \
    data.val_files="$HOME/data/gsm8k/test.parquet" \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    trainer.n_gpus_per_node=8 trainer.nnodes=1 \
    trainer.save_freq=20 trainer.test_freq=10 trainer.total_epochs=5 \
    "$@"
