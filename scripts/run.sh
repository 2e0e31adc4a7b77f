#!/usr/bin/env bash
# Set up .venv if needed, then run the default job (or the given Hydra overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export KEDRO_DISABLE_TELEMETRY=true HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/curate "$@"
