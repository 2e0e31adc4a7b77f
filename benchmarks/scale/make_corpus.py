"""A REPLICATED corpus for scale benchmarks only: the bundled corpus (16,513 real documents)
repeated with new ids until ``--n`` documents, written as parquet shards one at a time.

NOT a bigger corpus: every text is a copy (id ``<original>#rep<k>``): time and memory, never quality.

    .venv/bin/python benchmarks/scale/make_corpus.py --n 300000 --out /tmp/scale_corpus/300k
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402

COLUMNS = ["id", "text", "source", "url", "quality_label", "extra"]


def make_corpus(n: int, out: Path, rows_per_shard: int = 10_000) -> Path:
    """Write ``ceil(n / rows_per_shard)`` shards under ``out`` (skipped if already complete)."""
    out = Path(out)
    marker = out / "provenance.json"
    if marker.exists() and json.loads(marker.read_text()).get("documents") == n:
        return out
    out.mkdir(parents=True, exist_ok=True)
    base = bench.bundled(COLUMNS)
    written, shard = 0, 0
    while written < n:
        take = min(rows_per_shard, n - written)
        rows = (pd.RangeIndex(written, written + take) % len(base)).to_numpy()
        part = base.iloc[rows].reset_index(drop=True)
        copy = (pd.RangeIndex(written, written + take) // len(base)).to_numpy()
        part["id"] = part["id"] + "#rep" + pd.Series(copy).astype(str)
        part.to_parquet(out / f"part-{shard:05d}.parquet", index=False)
        written, shard = written + take, shard + 1
    marker.write_text(json.dumps({
        "documents": n, "shards": shard, "rows_per_shard": rows_per_shard,
        "what": "REPLICATION of the bundled corpus (data/01_raw/corpus) with new ids, for scale benchmarks only; "
                "every text is a copy of one of 16,513 bundled documents",
    }, indent=2))
    return out


if __name__ == "__main__":
    args = bench.parser(__doc__, n={"required": True}, out={"required": True}, rows_per_shard=10_000).parse_args()
    print(make_corpus(args.n, args.out, args.rows_per_shard))
