"""The curation side of ``bench_scale.py datatrove`` (project environment, ``PYTHONPATH=src``).

``read_write``: the input shards through ``run_shards`` unchanged, written by ``ShardWriter``; ``fasttext``:
the same plus a column ``fasttext_dclm`` from the project's ``FastTextRater`` (loaded once per worker process).
Run with ``benchmarks/scale`` on ``PYTHONPATH`` (``python -c "import curation_side; curation_side.main()"``), so
the shard workers import these functions by module name. Prints one JSON line last.
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
