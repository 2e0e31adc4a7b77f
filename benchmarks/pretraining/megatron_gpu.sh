#!/usr/bin/env bash
# The Megatron-core loop on one CUDA GPU (issue #21 item 6), run through the `device` tool:
#   device run: bash benchmarks/pretraining/megatron_gpu.sh   (carry .whl: the megatron-core wheel)
# Trains tiny_dense (sanity), qwen2_5_1_5b (the paper's dense model, full depth, short sequences) with a
# save + resume, and moe_7b at 2 of its 12 layers; exports the tiny checkpoint through dist_checkpointing.
# Logs land in $OUT (train_log.jsonl per run, summary.csv); `gpu_cells.py megatron --logs <label>=<log> ...`
# makes megatron_gpu.csv/png of them here. bf16, Megatron's DDP + distributed optimizer.
set -euo pipefail
OUT=${OUT:-/tmp/megatron_gpu}; mkdir -p "$OUT"
if ! python3 -c "import megatron.core" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
. benchmarks/_driver.sh; gpu_env; gpu_header "$OUT/gpu.txt"
W=/tmp/meg; mkdir -p $W
python3 - <<'PY'
import glob, pandas as pd
from curation.lm import train_tokenizer
from curation.pretraining.launch import convert
df = pd.concat(pd.read_parquet(f) for f in sorted(glob.glob("data/01_raw/corpus/*.parquet")))
df[["id", "text"]].to_parquet("/tmp/meg/docs.parquet")
train_tokenizer(df["text"].sample(3000, random_state=0).tolist(), vocab_size=8192).save("/tmp/meg/tokenizer.json")
print(convert("/tmp/meg/docs.parquet", "/tmp/meg/corpus", "/tmp/meg/tokenizer.json"))
PY
run() { name=$1; shift; start=$(date +%s)
  python3 -m curation.pretraining.launch train --device cuda --data-prefix $W/corpus --tokenizer $W/tokenizer.json \
    --save $W/$name "$@" 2>&1 | grep -v -i warn | tail -4
  cp $W/$name/train_log.jsonl "$OUT/${name}_log.jsonl"; echo "$name wall_s $(( $(date +%s) - start ))" | tee -a "$OUT/wall.txt"; }
[ -n "${SKIP_TINY:-}" ] || run tiny --model tiny_dense --seq-length 256 --global-batch-size 64 --micro-batch-size 64 --train-iters 200 \
  --lr 3e-3 --warmup-iters 20 --log-interval 20 --save-interval 200
[ -n "${SKIP_TINY:-}" ] || python3 -m curation.pretraining.launch export --load $W/tiny --output $W/tiny_export 2>&1 | grep -v -i warn | tail -1 | tee "$OUT/tiny_export.json"
run dense --model qwen2_5_1_5b --seq-length 2048 --global-batch-size 16 --micro-batch-size ${MBS:-1} --train-iters ${DENSE_ITERS:-30} \
  --lr 4e-4 --warmup-iters 10 --log-interval 5 --save-interval ${DENSE_SAVE:-30}
run dense --model qwen2_5_1_5b --seq-length 2048 --global-batch-size 16 --micro-batch-size ${MBS:-1} --train-iters ${DENSE_RESUME:-40} \
  --lr 4e-4 --warmup-iters 10 --log-interval 5 --save-interval 1000
run moe --model moe_7b --num-layers 2 --seq-length 2048 --global-batch-size 16 --micro-batch-size ${MBS:-1} --train-iters ${MOE_ITERS:-30} \
  --lr 4e-4 --warmup-iters 10 --log-interval 5 --save-interval 1000
python3 -m curation.pretraining.launch export --load $W/moe --output $W/moe_export 2>&1 | grep -v -i warn | tail -1 | tee "$OUT/moe_export.json"
