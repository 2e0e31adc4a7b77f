"""Sharded datasets and per-shard engines (algorithm core: no Kedro, MLflow or Hydra).

* :mod:`~curation.shards.manifest` / :mod:`~curation.shards.store`: a dataset is a folder of
  shards with a manifest; attributes (scores, embeddings) are aligned row for row with their
  document shards.
* :mod:`~curation.shards.executor`: run a plain per-shard function locally (one shard at a
  time) or as Ray tasks, with completion markers and resume.
* :mod:`~curation.shards.dedup`: duplicate ids across shards by a hash-partitioned pass.
* :mod:`~curation.shards.lineage`: refuse inputs that do not belong together.

The stages that run on shards live with their jobs (:mod:`curation.data.ingest`,
:mod:`curation.scoring.sharded`, :mod:`curation.embedding.sharded`): this package is the floor they stand on.
"""

from curation.shards.executor import EngineConfig, ShardResult, ShardTask, run_shards, sum_stats
from curation.shards.manifest import Manifest, ShardInfo, read_manifest
from curation.shards.store import ShardedDataset, ShardWriter, shard_names

__all__ = [
    "EngineConfig", "Manifest", "ShardInfo", "ShardResult", "ShardTask", "ShardWriter", "ShardedDataset",
    "read_manifest", "run_shards", "shard_names", "sum_stats",
]
