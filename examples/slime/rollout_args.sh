# The rollout flags of a slime run script (e.g. slime's scripts/run-qwen3-4B.sh) with
# TailSieve switched on: the three tailsieve lines are all that changes. Requires
# `pip install tailsieve` in slime's environment (see docs/integrations-slime.md).
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

ROLLOUT_ARGS=(
   --prompt-data "${DATA_DIR:-data}/dapo-math-17k/dapo-math-17k.jsonl"
   --input-key prompt
   --label-key label
   --apply-chat-template
   --rollout-shuffle
   --rm-type deepscaler
   --num-rollout 3000
   --rollout-batch-size 32          # N groups per step (TailSieve delivers exactly N)
   --n-samples-per-prompt 8         # n responses per group
   --rollout-max-response-len 8192
   --rollout-temperature 1
   --global-batch-size 256          # = rollout-batch-size x n-samples-per-prompt
   --rollout-function-path tailsieve.integrations.slime.generate_rollout
   --data-source-path tailsieve.integrations.slime.TailSieveDataSource
   --custom-config-path "$HERE/tailsieve.yaml"
)
