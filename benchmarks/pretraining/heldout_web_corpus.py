"""A second corpus for issue #43 item 6: the bundled corpus's web documents that no rater trains on.

The web documents of the half ``scoring.training.holdout_fraction=0.5`` reserves from every rater's training
set, as an id + text parquet corpus (``curate experiment=decide_ladder data.path=<out> ...`` scores them).

Run:  .venv/bin/python benchmarks/pretraining/heldout_web_corpus.py data/01_raw/heldout_web
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from curation.scoring.training_sets import TrainingSetConfig, category_of, holdout_rows  # noqa: E402

FRACTION = 0.5


def main(out: str) -> None:
    df = bench.bundled()
    held = holdout_rows(df["id"].tolist(), FRACTION, TrainingSetConfig.holdout_salt)
    web = (category_of(df["extra"]) == "web").to_numpy()
    keep = df.loc[held & web, ["id", "text"]].reset_index(drop=True)
    Path(out).mkdir(parents=True, exist_ok=True)
    keep.to_parquet(f"{out}/heldout_web.parquet", index=False)
    record = {
        "source": str(bench.CORPUS.relative_to(bench.ROOT)),
        "rule": f"extra.category == 'web' and holdout_rows(id, {FRACTION}, '{TrainingSetConfig.holdout_salt}')",
        "documents": len(keep),
        "characters": int(keep["text"].str.len().sum()),
        "of_web": int(web.sum()),
        "of_all": len(df),
    }
    Path(f"{out}/provenance.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1])
