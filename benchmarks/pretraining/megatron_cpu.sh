#!/usr/bin/env bash
# The Megatron-core loop on CPU with gloo (issue #21 item 5), a few hundred steps:
#   bash benchmarks/pretraining/megatron_cpu.sh
# tiny_dense 200 steps with a checkpoint every 100, then the same run resumed to 300; tiny_moe 200 steps; both
# exported to this project's model folder and scored by `curate pipeline=evaluate`'s scorer on 40 items per task.
# Writes benchmarks/results/megatron_cpu.csv (one row per logged step) and megatron_cpu_summary.csv.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${W:-/tmp/megatron_cpu}; rm -rf "$W"; mkdir -p "$W"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)  # these machines are shared: the summary says how busy it was
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore KEDRO_DISABLE_TELEMETRY=true HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=.venv/bin/python
$PY - "$W" <<'PY'
import glob, sys, pandas as pd
from curation.lm import train_tokenizer
from curation.pretraining.launch import convert
w = sys.argv[1]
df = pd.concat(pd.read_parquet(f) for f in sorted(glob.glob("data/01_raw/corpus/*.parquet")))
df = df[["id", "text"]].sample(3000, random_state=0)
df.to_parquet(f"{w}/docs.parquet")
train_tokenizer(df["text"].tolist(), vocab_size=4096).save(f"{w}/tokenizer.json")
print(convert(f"{w}/docs.parquet", f"{w}/corpus", f"{w}/tokenizer.json"))
PY
common=(--device cpu --data-prefix "$W/corpus" --tokenizer "$W/tokenizer.json" --seq-length 128 --global-batch-size 8
        --micro-batch-size 8 --lr 3e-3 --warmup-iters 20 --log-interval 10)
run() { name=$1; shift; start=$(date +%s)
  $PY -m curation.pretraining.launch train --save "$W/$name" "${common[@]}" "$@" 2>&1 | grep -v -i warn | tail -2
  echo "$name $* wall_s $(( $(date +%s) - start ))" | tee -a "$W/wall.txt"; }
run dense --model tiny_dense --train-iters 200 --save-interval 100
run dense --model tiny_dense --train-iters 300 --save-interval 100
run moe --model tiny_moe --train-iters 200 --save-interval 200
for name in dense moe; do
  $PY -m curation.pretraining.launch export --load "$W/$name" --output "$W/${name}_export" 2>&1 | grep -v -i warn | tail -1
done
LOAD_AFTER_TRAIN=$(cut -d' ' -f1-3 /proc/loadavg)
$PY - "$W" "$LOAD_BEFORE" "$LOAD_AFTER_TRAIN" <<'PY'
import json, sys, time
from pathlib import Path
import pandas as pd
from curation.evaluation import evaluate
from curation.lm import load_model, load_tokenizer
w = Path(sys.argv[1])
rows, summary = [], []
for name in ("dense", "moe"):
    log = [json.loads(l) for l in (w / name / "train_log.jsonl").read_text().splitlines()]
    resumed = [r["resumed_from"] for r in log if "resumed_from" in r]
    steps = [r for r in log if "iteration" in r]
    rows += [{"model": name, **r} for r in steps]
    t = time.perf_counter()
    folder = w / f"{name}_export"
    ev = evaluate(load_model(folder), load_tokenizer(folder / "tokenizer.json"), {"limit": 40}).metrics()
    summary.append({"model": name, "first_step": steps[0]["iteration"], "first_loss": steps[0]["lm_loss"],
                    "last_step": steps[-1]["iteration"], "last_loss": steps[-1]["lm_loss"],
                    "resumed_from": resumed[0] if resumed else "", "eval_seconds": round(time.perf_counter() - t),
                    "loadavg_before": sys.argv[2], "loadavg_after_training": sys.argv[3],
                    **{k: v for k, v in ev.items() if k in ("average", "mc_correct_prob_per_char", "ref_bits_per_byte")}})
Path("benchmarks/results").mkdir(exist_ok=True)
pd.DataFrame(rows).to_csv("benchmarks/results/megatron_cpu.csv", index=False)
pd.DataFrame(summary).to_csv("benchmarks/results/megatron_cpu_summary.csv", index=False)
print(pd.DataFrame(summary).to_string())
PY
cp "$W/wall.txt" benchmarks/results/megatron_cpu_wall.txt
