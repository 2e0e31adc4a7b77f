#!/usr/bin/env bash
# experiment=decide end to end on the bundled corpus exported as a plain id + text corpus (issue #38):
# the wall time, the load beside it (every 15 s) and the run's decisions, into benchmarks/results/decide_<tag>/.
# Usage: bash benchmarks/pretraining/decide_bundled.sh TAG [extra Hydra overrides...]
#   TAG      names the namespace, the output folder and (with a fresh cache) the cache folder
# The cache (cache.dir) is data/04_feature/cache_decide_<TAG>: empty on the first call, so the figure is
# from scratch (the static embedder and reference raters, built by the set-up, are not part of it).
set -euo pipefail
export KEDRO_DISABLE_TELEMETRY=true
cd "$(dirname "$0")/../.."
tag=${1:?usage: decide_bundled.sh TAG [overrides...]}; shift
plain=data/01_raw/bundled_plain
out=benchmarks/results/decide_${tag}
mkdir -p "$plain" "$out"
.venv/bin/python - "$plain" <<'PY'
import sys
from pathlib import Path
import pandas as pd
for path in sorted(Path("data/01_raw/corpus").glob("corpus-*.parquet")):
    pd.read_parquet(path, columns=["id", "text"]).to_parquet(Path(sys.argv[1]) / path.name, index=False)
PY
. benchmarks/_driver.sh; load_log "$out/loadavg.txt" 15
trap 'kill $LOAD_LOGGER 2>/dev/null' EXIT
start=$(date +%s)
.venv/bin/curate experiment=decide data.path="$plain" run.namespace="decide_${tag}" \
  cache.dir="data/04_feature/cache_decide_${tag}" "$@" 2>&1 | tee "$out/run.log" | grep --line-buffered '^\[decide\]'
end=$(date +%s)
kill $LOAD_LOGGER 2>/dev/null || true
# the wall time with the 1-min load over the run (min, median, max): a figure taken beside other work says so
load=$(awk '{print $2}' "$out/loadavg.txt" | sort -n | awk '{a[NR]=$1} END{printf "%s,%s,%s", a[1], a[int(NR/2)+1], a[NR]}')
printf "wall_seconds,load1_min,load1_median,load1_max\n%s,%s\n" "$((end - start))" "$load" > "$out/wall.csv"
cp data/08_reporting/decide_${tag}/{decisions.csv,decisions.png,recommendation.md,item_vs_seed.csv} "$out"/ 2>/dev/null || true
cp data/08_reporting/decide_${tag}/size_agreement.csv "$out"/ 2>/dev/null || true
cp data/07_model_output/decide_${tag}/decide_cells.csv "$out"/
echo "wall $((end - start)) s; load log $out/loadavg.txt"
