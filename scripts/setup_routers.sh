#!/usr/bin/env bash
# Create (idempotently) a separate virtualenv holding the external routers that
# benchmarks/bench_routers_live.py puts beside `tailsieve serve`: smg (the SGLang Model
# Gateway) and vllm-router, at the versions pinned in constraints/routers.txt.
#
#   bash scripts/setup_routers.sh            # -> .venv-routers in the repo root
#   TAILSIEVE_ROUTERS_VENV=/some/dir bash scripts/setup_routers.sh
#
# Both ship prebuilt binary wheels on PyPI (Rust routers behind a Python entry point); they are
# never dependencies of TailSieve. A second run is a no-op (marker file + CLI check). When the
# wheels cannot be had, it exits 1 with the reason; the benchmark then skips those routers.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TAILSIEVE_ROUTERS_VENV:-$REPO_ROOT/.venv-routers}"
PINS="$REPO_ROOT/constraints/routers.txt"
PYTHON_BIN="${PYTHON:-python3}"
MARKER="$VENV/.tailsieve-routers-$(sha256sum "$PINS" | cut -c1-12)-ok"

if [[ -f "$MARKER" && -x "$VENV/bin/smg" && -x "$VENV/bin/vllm-router" ]]; then
    echo "setup_routers: $VENV already has the routers of $PINS (marker $MARKER); nothing to do"
    exit 0
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "setup_routers: creating virtualenv $VENV"
    "$PYTHON_BIN" -m venv "$VENV"
fi
PY="$VENV/bin/python"
mapfile -t REQS < <(grep -E '^[A-Za-z0-9_.-]+==' "$PINS")
echo "setup_routers: installing ${REQS[*]} into $VENV"
if ! "$PY" -m pip install --quiet --disable-pip-version-check --no-cache-dir -c "$PINS" \
        "${REQS[@]}"; then
    echo "setup_routers: pip could not install ${REQS[*]} (no network to PyPI, or no wheel" \
         "for this platform: $(uname -m), $("$PY" -V))" >&2
    exit 1
fi
for exe in smg vllm-router; do
    if [[ ! -x "$VENV/bin/$exe" ]]; then
        echo "setup_routers: the install left no $VENV/bin/$exe" >&2
        exit 1
    fi
done
touch "$MARKER"
echo "setup_routers: done ($VENV/bin/smg, $VENV/bin/vllm-router)"
