#!/usr/bin/env bash
# Run the whole test suite from a fresh clone:
#   bash scripts/test.sh [pytest args...]
# Creates .venv (TailSieve + dev tools), .venv-vllm (the real vLLM CPU engine, test-only) and
# .venv-verl (verl 0.9.1 on CPU torch, for the verl adapter's tests),
# builds the tiny local model, starts two vLLM CPU servers unless TAILSIEVE_VLLM_ENDPOINTS
# already names running ones, runs ruff, mypy, the strict docs build and pytest, and stops what
# it started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,ray]"

if ! command -v chromium >/dev/null 2>&1; then
    echo "test.sh: installing Debian's chromium for the report rendering test" >&2
    if [[ "$(id -u)" == 0 ]]; then
        apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
    else
        sudo apt-get update -qq >&2 && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
    fi
fi

bash scripts/setup_vllm.sh >&2
export TAILSIEVE_VLLM_PYTHON="$ROOT/.venv-vllm/bin/python"
export TAILSIEVE_TINY_MODEL_DIR="$ROOT/.cache/tiny-qwen2"
if [[ ! -f "$TAILSIEVE_TINY_MODEL_DIR/config.json" ]]; then
    "$TAILSIEVE_VLLM_PYTHON" scripts/build_tiny_model.py "$TAILSIEVE_TINY_MODEL_DIR" >&2
fi

started=""
stop_servers() {
    if [[ -n "$started" ]]; then
        bash scripts/stop_vllm_servers.sh >&2 || true
    fi
}
trap stop_servers EXIT
if [[ -z "${TAILSIEVE_VLLM_ENDPOINTS:-}" ]]; then
    echo "test.sh: starting two vLLM CPU servers (about 30 s)" >&2
    TAILSIEVE_VLLM_ENDPOINTS="$(env -u TAILSIEVE_VLLM_MODEL bash scripts/start_vllm_servers.sh 2)"
    started=1
fi
export TAILSIEVE_VLLM_ENDPOINTS
export TAILSIEVE_VLLM_MODEL="${TAILSIEVE_VLLM_SERVED_NAME:-tiny}"
echo "test.sh: vLLM endpoints $TAILSIEVE_VLLM_ENDPOINTS" >&2

.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
# the docs: a broken link, a missing anchor or a page left out of the nav fails (not --quiet:
# it hides the warnings that --strict turns into failures)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$ROOT/.cache/docs-site"
echo "test.sh: docs built (mkdocs build --strict)" >&2
.venv/bin/pytest "$@"

# verl adapter tests with verl's real classes, in their own venv (the main venv skips them)
bash scripts/setup_verl.sh >&2
.venv-verl/bin/python -m pytest -p no:cacheprovider tests/integrations/verl -q
