#!/usr/bin/env bash
# Create (idempotently) a separate virtualenv with verl 0.9.1 on CPU torch, for the verl
# adapter's tests (tests/integrations/verl); TailSieve is installed there editable.
#
#   bash scripts/setup_verl.sh            # -> .venv-verl in the repo root
#   TAILSIEVE_VERL_VENV=/some/dir bash scripts/setup_verl.sh
#
# torch is installed first, on its own, so verl's resolution cannot pull a CUDA build: on this
# machine pip's find-links holds torch 2.13.0+cpu, which `pip install torch==2.13.0` takes
# (elsewhere set TAILSIEVE_TORCH_SPEC / PIP_INDEX_URL for a CPU wheel). verl's base install
# misses cachetools, uvicorn and fastapi, which its rollout modules import. About 2-3 minutes
# and 2 GB; a second run is a no-op (marker file + import check).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TAILSIEVE_VERL_VENV:-$REPO_ROOT/.venv-verl}"
VERL_VERSION="${TAILSIEVE_VERL_VERSION:-0.9.1}"
TORCH_SPEC="${TAILSIEVE_TORCH_SPEC:-torch==2.13.0}"
PYTHON_BIN="${PYTHON:-python3}"
MARKER="$VENV/.tailsieve-verl-$VERL_VERSION-ok"
# the versions tested with verl 0.9.1 (no resolver backtracking); another version: none
CONSTRAINTS=()
if [[ "$VERL_VERSION" == 0.9.1 && "${TAILSIEVE_CONSTRAINTS:-1}" != 0 ]]; then
    CONSTRAINTS=(-c "$REPO_ROOT/constraints/verl.txt")
fi
CHECK="import verl, torch, pytest; from verl.experimental.agent_loop.agent_loop import AgentLoopManager; import tailsieve.integrations.verl"

if [[ -f "$MARKER" ]] && "$VENV/bin/python" -W ignore -c "$CHECK" >/dev/null 2>&1; then
    echo "setup_verl: $VENV already has verl==$VERL_VERSION (marker $MARKER); nothing to do"
    exit 0
fi

start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "setup_verl: creating virtualenv $VENV"
    "$PYTHON_BIN" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true

echo "setup_verl: installing $TORCH_SPEC (CPU)"
"$PY" -m pip install --quiet "${CONSTRAINTS[@]}" "$TORCH_SPEC"
echo "setup_verl: installing verl==$VERL_VERSION"
"$PY" -m pip install --quiet "${CONSTRAINTS[@]}" "verl==$VERL_VERSION" cachetools uvicorn fastapi pytest pytest-asyncio hypothesis
echo "setup_verl: installing TailSieve (editable)"
"$PY" -m pip install --quiet "${CONSTRAINTS[@]}" -e "$REPO_ROOT"

echo "setup_verl: checking the import"
"$PY" -W ignore -c "$CHECK; print('verl', verl.__version__, 'torch', torch.__version__)"
if "$PY" -c "import torch, sys; sys.exit(0 if torch.version.cuda is None else 1)"; then :; else
    echo "setup_verl: warning: torch is a CUDA build (set TAILSIEVE_TORCH_SPEC for a CPU wheel)" >&2
fi

touch "$MARKER"
echo "setup_verl: done in $(( $(date +%s) - start )) s; python at $PY"
