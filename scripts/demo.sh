#!/usr/bin/env bash
# Set TailSieve up from a fresh clone and run the main job on its embedded default:
#   bash scripts/demo.sh [tailsieve demo options...]
# 8 emulated vLLM-compatible replicas on 127.0.0.1, Uniform vs TailSieve through the live
# runtime, a comparison table, and an HTML report (path printed at the end).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints/dev.txt -e .
exec .venv/bin/tailsieve demo "$@"
