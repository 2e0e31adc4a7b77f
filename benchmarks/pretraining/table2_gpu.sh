#!/usr/bin/env bash
# DATAMASK Table 2 decision suite on one GPU (issue #21 items 3 and 6), through the `device` tool:
#   device run: bash benchmarks/pretraining/table2_gpu.sh     (carry gpu_in, written by
#   `gpu_cells.py prepare --experiment table2 --out gpu_in`)
# Two suites at once on the one GPU, one process per seed:
#   medium: the ~29M-parameter model, 4,194,304 tokens per cell, six corpora x 3 seeds from scratch;
#   tiny:   the CPU suite's own cells (conf/experiment/table2_tiny.yaml: 3.2M model, 262,144 tokens, constant 4e-4).
# Every model is evaluated on the same offline tasks (LIMIT items each). The CSVs land in $OUT/{medium,tiny}
# (then `gpu_cells.py report --experiment table2 --cells <files_at>/medium/values.csv` here).
set -uo pipefail
OUT=${OUT:-/tmp/table2_gpu_out}; mkdir -p "$OUT/medium" "$OUT/tiny"
. benchmarks/_driver.sh; gpu_env; gpu_header "$OUT/gpu.txt"
S=benchmarks/pretraining/gpu_cells.py LIMIT=${LIMIT:-300}
start=$(date +%s)
timeout ${BUDGET_S:-470} python3 $S run --inputs gpu_in --out /tmp/medium --sizes medium --tokens ${TOKENS:-4194304} \
  --limit $LIMIT --seeds 3 2>&1 | grep -v -i "warn" > /tmp/medium.log &
timeout ${BUDGET_S:-470} python3 $S run --inputs gpu_in --out /tmp/tiny --sizes tiny --tokens 262144 --limit $LIMIT \
  --seeds 3 2>&1 | grep -v -i "warn" > /tmp/tiny.log &
wait
echo "wall_s $(( $(date +%s) - start ))" | tee -a "$OUT/gpu.txt"
for s in medium tiny; do
  python3 $S gather --out /tmp/$s >> "$OUT/gpu.txt" 2>&1
  cp /tmp/$s/*.csv "$OUT/$s/" 2>/dev/null
  tail -25 /tmp/$s.log >> "$OUT/gpu.txt"
done
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
