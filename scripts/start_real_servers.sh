#!/usr/bin/env bash
# Start K vLLM CPU servers serving the real model (SmolLM2-135M-Instruct, converted by
# scripts/setup_real_model.sh) on 127.0.0.1 ports 8111.. and wait until they answer /health.
#
#   bash scripts/start_real_servers.sh [K]      # K defaults to 2
#
# Prints the endpoints on stdout as one comma-separated line (progress on stderr), for
# TAILSIEVE_REAL_ENDPOINTS. Stop them with
#   bash scripts/stop_vllm_servers.sh .cache/real-servers/pids
# Prints nothing and exits 0 when the model is unavailable (setup_real_model.sh wrote
# <model dir>.unavailable): the real-model tests then skip with that reason; in CI (CI=true or
# CI=1) it exits 1 with the reason instead.
#
# Environment (all optional; the rest as in scripts/start_vllm_servers.sh):
#   TAILSIEVE_REAL_MODEL_DIR  checkpoint        (default .cache/smollm2-135m-instruct)
#   TAILSIEVE_REAL_MODEL      served name       (default smollm2)
#   TAILSIEVE_REAL_PORT       first port        (default 8111)
#   TAILSIEVE_REAL_LOG_DIR    logs + pid file   (default .cache/real-servers)
#   TAILSIEVE_REAL_CORES      cores, comma list (default 0,1,..; one core each)
#   TAILSIEVE_REAL_MAX_LEN    --max-model-len   (default 2048: prompt + the recorder's and the
#                             real demo's 1,024-token responses)
# Memory: each server holds the 135M model in bf16, 1 GB of KV cache and vLLM's processes,
# about 3 GB resident; the test command runs two of them beside the two tiny-model servers.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
K="${1:-2}"
MODEL="${TAILSIEVE_REAL_MODEL_DIR:-$REPO_ROOT/.cache/smollm2-135m-instruct}"
if [[ -f "$MODEL.unavailable" || ! -f "$MODEL/config.json" ]]; then
    why="$(cat "$MODEL.unavailable" 2>/dev/null || echo "run scripts/setup_real_model.sh")"
    if [[ "${CI:-}" =~ ^([Tt][Rr][Uu][Ee]|1)$ ]]; then
        echo "start_real_servers: error: no real model at $MODEL ($why); CI=${CI} needs it" >&2
        exit 1
    fi
    echo "start_real_servers: no real model at $MODEL ($why); not starting real-model servers" >&2
    exit 0
fi
LOG_DIR="${TAILSIEVE_REAL_LOG_DIR:-$REPO_ROOT/.cache/real-servers}"
TAILSIEVE_VLLM_MODEL="$MODEL" \
TAILSIEVE_VLLM_NAME="${TAILSIEVE_REAL_MODEL:-smollm2}" \
TAILSIEVE_VLLM_PORT="${TAILSIEVE_REAL_PORT:-8111}" \
TAILSIEVE_VLLM_LOG_DIR="$LOG_DIR" \
TAILSIEVE_VLLM_PID_FILE="$LOG_DIR/pids" \
TAILSIEVE_VLLM_CORES="${TAILSIEVE_REAL_CORES:-}" \
TAILSIEVE_VLLM_MAX_LEN="${TAILSIEVE_REAL_MAX_LEN:-2048}" \
    exec bash "$REPO_ROOT/scripts/start_vllm_servers.sh" "$K"
