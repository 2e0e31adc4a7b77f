#!/usr/bin/env bash
# Mutation testing of the scientific core with mutmut 3.x, per module (see run.py's docstring for setup).
#   MUTMUT=/work/mutvenv/bin/mutmut bash benchmarks/mutation/run.sh scoring/merge
# Writes benchmarks/results/mutation.csv. A benchmark, not part of CI: it runs each module's tests once per mutant.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
exec "$PYTHON" benchmarks/mutation/run.py "$@"
