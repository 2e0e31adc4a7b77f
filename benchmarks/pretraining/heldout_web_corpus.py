"""A second corpus for issue #43 item 6: the bundled corpus's web documents that no rater trains on.

The raters (fastText x2, Edu, Wiki, DSIR targets) are fitted on the bundled corpus with
``scoring.training.holdout_fraction=0.5``: every document whose salted id hash falls in the reserved half
is left out of every training set. This script writes the web documents of that half (real Common Crawl and
HTML-page text, about 3,500 documents) as a parquet corpus of id + text (no category, no human label), so
that ``curate experiment=decide_ladder data.path=<out> scoring.training.holdout_fraction=0.5`` scores them
with raters that never saw them.

Run:  .venv/bin/python benchmarks/pretraining/heldout_web_corpus.py data/01_raw/heldout_web
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import pandas as pd

from curation.scoring.training_sets import TrainingSetConfig, category_of, holdout_rows

FRACTION = 0.5


def main(out: str, corpus: str = "data/01_raw/corpus") -> None:
    files = sorted(glob.glob(f"{corpus}/corpus-*.parquet"))
    df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    held = holdout_rows(df["id"].tolist(), FRACTION, TrainingSetConfig.holdout_salt)
    web = (category_of(df["extra"]) == "web").to_numpy()
    keep = df.loc[held & web, ["id", "text"]].reset_index(drop=True)
    Path(out).mkdir(parents=True, exist_ok=True)
    keep.to_parquet(f"{out}/heldout_web.parquet", index=False)
    record = {
        "source": corpus,
        "rule": f"extra.category == 'web' and holdout_rows(id, {FRACTION}, '{TrainingSetConfig.holdout_salt}')",
        "documents": len(keep),
        "characters": int(keep["text"].str.len().sum()),
        "of_web": int(web.sum()),
        "of_all": len(df),
    }
    Path(f"{out}/provenance.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:])
