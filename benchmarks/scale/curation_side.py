"""The curation side of ``bench_datatrove.py`` (project environment, ``PYTHONPATH=src``).

* ``read_write``: the input shards (``CorpusShardsDataset``, as ingest reads them) through
  ``run_shards`` with a function that hands each shard back unchanged; ``ShardWriter`` writes it
  (atomic parquet, sha256 digest, stats, completion marker), then the manifest.
* ``fasttext``: the same, the function adding one column ``fasttext_dclm`` = the project's
  ``FastTextRater`` (loaded by ``FastTextRater.load``: DCLM recipe, newlines -> spaces; score =
  P(``__label__hq``)), loaded once per worker process (a per-process cache, as
  ``curation.scoring.sharded.load_fitted``). The whole document is written with its score, as
  datatrove's pipeline writes it (the project's scoring stage writes only id + scores).

Run as ``python -c "import curation_side; curation_side.main()" ...`` with ``benchmarks/scale`` on
``PYTHONPATH``, so the shard workers import these functions by module name. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial

_RATERS: dict = {}


def read_write_shard(frame, name):
    from curation.shards import ShardResult

    return ShardResult({"documents": frame}, {"rows": len(frame)})


def rater(model: str):
    if model not in _RATERS:
        from curation.scoring.fasttext_rater import FastTextRater

        _RATERS[model] = FastTextRater.load(model)
    return _RATERS[model]


def fasttext_shard(frame, name, *, model: str):
    from curation.shards import ShardResult

    frame["fasttext_dclm"] = rater(model).score(frame["text"].tolist())
    return ShardResult({"documents": frame}, {"rows": len(frame)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=["read_write", "fasttext"])
    parser.add_argument("--input", required=True, help="folder of parquet shards")
    parser.add_argument("--output", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", help="fastText .bin with its .json sidecar (stage fasttext)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    from curation.datasets import CorpusShardsDataset
    from curation.shards import EngineConfig, ShardTask, ShardWriter, run_shards

    imported = time.perf_counter()
    tasks = [ShardTask(k.removesuffix(".parquet"), v) for k, v in CorpusShardsDataset(path=args.input).load().items()]
    fn = read_write_shard if args.stage == "read_write" else partial(fasttext_shard, model=args.model)
    run_shards(fn, tasks, {"documents": (args.output, "frame")}, EngineConfig(workers=args.workers, progress=False),
               desc=args.stage)
    manifest = ShardWriter(args.output, "frame").finalize([t.name for t in tasks], stage=f"bench_{args.stage}")
    done = time.perf_counter()
    print(json.dumps({"import_seconds": imported - start, "engine_seconds": done - imported, "rows": manifest.rows}))
