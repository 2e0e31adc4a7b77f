#!/usr/bin/env bash
# Set up .venv if needed, then run the whole test suite (extra args go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Debian's chromium for the headless browser tests (tests/browser/); a no-op when installed.
bash scripts/install_browser.sh
export KEDRO_DISABLE_TELEMETRY=true HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
exec .venv/bin/python -m pytest "$@"
