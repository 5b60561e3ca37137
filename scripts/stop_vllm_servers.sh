#!/usr/bin/env bash
# Stop the vLLM servers that scripts/start_vllm_servers.sh started: exactly the
# PIDs in its pid file (and the process group each leads, i.e. the engine-core
# child). SIGTERM first, SIGKILL after a grace period.
#
#   bash scripts/stop_vllm_servers.sh [PID_FILE]
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOG_DIR="${TAILSIEVE_VLLM_LOG_DIR:-$REPO_ROOT/.cache/vllm-servers}"
PID_FILE="${1:-${TAILSIEVE_VLLM_PID_FILE:-$LOG_DIR/pids}}"
GRACE="${TAILSIEVE_VLLM_STOP_GRACE:-20}"

if [[ ! -f "$PID_FILE" ]]; then
    echo "stop_vllm_servers: no pid file $PID_FILE; nothing to stop" >&2
    exit 0
fi

pids=()
while read -r pid _; do
    [[ "$pid" =~ ^[0-9]+$ ]] && pids+=("$pid")
done <"$PID_FILE"

# Each server was started with setsid, so its pid is also its process-group id;
# signal the group only when the pid still leads its own group.
signal() {
    local sig="$1" pid="$2"
    if [[ "$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')" == "$pid" ]]; then
        kill "-$sig" -- "-$pid" 2>/dev/null || true
    else
        kill "-$sig" "$pid" 2>/dev/null || true
    fi
}

for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
        echo "stop_vllm_servers: stopping pid $pid" >&2
        signal TERM "$pid"
    fi
done
deadline=$(($(date +%s) + GRACE))
for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && (($(date +%s) < deadline)); do
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "stop_vllm_servers: pid $pid still alive after ${GRACE}s; SIGKILL" >&2
        signal KILL "$pid"
    fi
    # Leftover group members (engine core) after the leader exited.
    kill -0 -- "-$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null
done
rm -f "$PID_FILE"
echo "stop_vllm_servers: stopped ${#pids[@]} server(s)" >&2
