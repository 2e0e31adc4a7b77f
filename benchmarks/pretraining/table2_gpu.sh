#!/usr/bin/env bash
# DATAMASK Table 2 decision suite with a ~29M-parameter model on one GPU (issue #21 item 6), through the
# `device` tool:   device run: bash benchmarks/pretraining/table2_gpu.sh   (carry gpu_in: `table2_gpu.py prepare`)
# Trains the six Table 2 corpora x 3 seeds (one process per seed on the one GPU) and evaluates every model
# on the offline tasks; values.csv and cells.csv land in $OUT. Then, here:
#   PYTHONPATH=src python benchmarks/pretraining/table2_gpu.py decide --values <files_at>/values.csv
set -euo pipefail
OUT=${OUT:-/tmp/table2_gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, lightning, tokenizers, pyarrow; print('torch', torch.__version__, 'lightning', lightning.__version__)" | tee -a "$OUT/gpu.txt"
start=$(date +%s)
python3 benchmarks/pretraining/table2_gpu.py run --inputs gpu_in --out /tmp/t2 --tokens ${TOKENS:-4194304} \
  --limit ${LIMIT:-500} --seeds ${SEEDS:-3} --batch-size 32 --lr 1e-3 --warmup 20 2>&1 | grep -v -i "warn" | tail -40
echo "wall_s $(( $(date +%s) - start ))" | tee -a "$OUT/gpu.txt"
cp /tmp/t2/values.csv /tmp/t2/cells.csv "$OUT/"
