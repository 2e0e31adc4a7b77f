#!/usr/bin/env bash
# The digest of what the set-up's prebuilt static embedder, reference raters and decontamination index are built
# from (called by scripts/setup.sh, run in the project root; $1 = the install's digest): the primary config and the
# config groups the builders read (scoring, embedding, scale, data, eval), the bundled corpus's file names and
# sizes, and the builders' code. Other config groups (selection, budget, experiment, ...) do not change them, nor
# this digest.
set -euo pipefail
{ echo "${1:-}"; cat conf/config.yaml
  find conf/scoring conf/embedding conf/scale conf/data conf/eval -name '*.yaml' | LC_ALL=C sort | xargs cat
  find -L data/01_raw/corpus/ -type f -printf '%P %s\n' 2>/dev/null | LC_ALL=C sort
  cat src/curation/embedding/static.py src/curation/scoring/reference.py src/curation/scoring/training_sets.py \
      src/curation/scoring/fasttext_rater.py src/curation/scoring/embedding_raters.py src/curation/scoring/dsir.py \
      src/curation/dedup/contamination.py
} | sha256sum | cut -d' ' -f1
