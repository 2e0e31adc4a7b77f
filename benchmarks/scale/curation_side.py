"""The curation side of ``bench_scale.py datatrove`` (project environment): the shards through ``run_shards`` and
``ShardWriter``, for ``fasttext`` with the project's ``FastTextRater``. Run with ``src`` and ``benchmarks/scale`` on
``PYTHONPATH`` (``python -c "import curation_side; curation_side.main()"``), so the shard workers import
``side_shard`` by module name. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial

_RATERS: dict = {}


def side_shard(frame, name, *, model: str | None = None):
    """``read_write`` (no model): the shard unchanged; ``fasttext``: plus the column ``fasttext_dclm``."""
    from curation.shards import ShardResult

    if model:
        if model not in _RATERS:  # once per worker process
            from curation.scoring.fasttext_rater import FastTextRater

            _RATERS[model] = FastTextRater.load(model)
        frame["fasttext_dclm"] = _RATERS[model].score(frame["text"].tolist())
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
    fn = partial(side_shard, model=args.model if args.stage == "fasttext" else None)
    run_shards(fn, tasks, {"documents": (args.output, "frame")}, EngineConfig(workers=args.workers, progress=False),
               desc=args.stage)
    manifest = ShardWriter(args.output, "frame").finalize([t.name for t in tasks], stage=f"bench_{args.stage}")
    done = time.perf_counter()
    print(json.dumps({"import_seconds": imported - start, "engine_seconds": done - imported, "rows": manifest.rows}))
