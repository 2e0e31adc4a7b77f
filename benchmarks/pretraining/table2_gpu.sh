#!/usr/bin/env bash
# DATAMASK Table 2 decision suite on one GPU (issue #21 items 3, 4 and 6), through the `device` tool:
#   device run: bash benchmarks/pretraining/table2_gpu.sh     (carry gpu_in, written by `table2_gpu.py prepare`)
# Two suites at once on the one GPU, one process per (protocol, seed):
#   small: the ~29M-parameter model, 4,194,304 tokens per cell, six corpora x 3 seeds from scratch, plus the
#          annealing verification of the same six corpora (3 seeds, each its own WSD base);
#   tiny:  the CPU suite's own cells (conf/experiment/table2_tiny.yaml: 3.2M model, 262,144 tokens, constant 4e-4).
# Every model is evaluated on the same offline tasks (LIMIT items each). The CSVs land in $OUT/{small,tiny}; then
#   PYTHONPATH=src python benchmarks/pretraining/table2_gpu.py decide --values <files_at>/small/values.csv
set -uo pipefail
OUT=${OUT:-/tmp/table2_gpu_out}; mkdir -p "$OUT/small" "$OUT/tiny"
. benchmarks/_driver.sh; gpu_env; gpu_header "$OUT/gpu.txt"
S=benchmarks/pretraining/table2_gpu.py LIMIT=${LIMIT:-300}
start=$(date +%s)
timeout ${BUDGET_S:-470} python3 $S run --inputs gpu_in --out /tmp/small --model small --protocols train,verify \
  --tokens ${TOKENS:-4194304} --limit $LIMIT --seeds 3 2>&1 | grep -v -i "warn" > /tmp/small.log &
timeout ${BUDGET_S:-470} python3 $S run --inputs gpu_in --out /tmp/tiny --model tiny --protocols train \
  --tokens 262144 --limit $LIMIT --seeds 3 2>&1 | grep -v -i "warn" > /tmp/tiny.log &
wait
echo "wall_s $(( $(date +%s) - start ))" | tee -a "$OUT/gpu.txt"
for s in small tiny; do
  python3 $S gather --out /tmp/$s >> "$OUT/gpu.txt" 2>&1
  cp /tmp/$s/*.csv "$OUT/$s/" 2>/dev/null
  tail -25 /tmp/$s.log >> "$OUT/gpu.txt"
done
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
