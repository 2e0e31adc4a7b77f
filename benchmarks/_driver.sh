# Sourced by the benchmarks' bash wrappers (the shell side of _driver.py).
# gpu_env: a GPU run's environment (this tree's src/ first, unbuffered, quiet).
gpu_env() { export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore TOKENIZERS_PARALLELISM=false; }
# gpu_header FILE: the GPU, torch, Lightning and the CPU count, into FILE and stdout.
gpu_header() { { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, lightning, os; print('torch', torch.__version__, 'lightning', lightning.__version__, 'cpus', os.cpu_count())" || true
} | tee "$1"; }
# load_log FILE SECONDS: "time load1 load5 load15" every SECONDS in the background; LOAD_LOGGER is its pid.
load_log() { ( while true; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep "$2"; done ) > "$1" & LOAD_LOGGER=$!; }
