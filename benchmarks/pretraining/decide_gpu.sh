#!/usr/bin/env bash
# The third size of the decision check on one GPU, through the `device` tool (issue #38 item 4):
#   device run: bash benchmarks/pretraining/decide_gpu.sh      (carry gpu_decide.tgz: `gpu_cells.py prepare
#   --experiment decide --out gpu_decide`, then `tar -czf gpu_decide.tgz gpu_decide`; the folder alone is over
#   the tool's 64 MiB with the tree)
# 12 processes, one per (candidate, seed): the ~29M `medium` cell, then the tiny cell again as a device check.
set -uo pipefail
OUT=${OUT:-/tmp/decide_gpu_out}; mkdir -p "$OUT"
. benchmarks/_driver.sh; gpu_env; gpu_header "$OUT/gpu.txt"
IN=${INPUTS:-gpu_decide}   # INPUTS=gpu_decide_b1 SIZES=medium: decide_B1's other three (prepare --experiment decide_b1)
[ -d "$IN" ] || tar -xzf "$IN.tgz"
S=benchmarks/pretraining/gpu_cells.py
start=$(date +%s)
load_log "$OUT/loadavg.txt" 10
timeout ${BUDGET_S:-420} python3 $S run --inputs "$IN" --out /tmp/decide_gpu --sizes ${SIZES:-medium,tiny} --seeds 3 \
  2>&1 | grep --line-buffered -v -i "warn" | tee "$OUT/run.log"
kill $LOAD_LOGGER
echo "wall_s $(( $(date +%s) - start ))" | tee -a "$OUT/gpu.txt"
python3 $S gather --out /tmp/decide_gpu 2>&1 | tail -2
cp /tmp/decide_gpu/cells.csv "$OUT/" 2>/dev/null
tar -czf "$OUT/cells.tgz" -C /tmp/decide_gpu cells
