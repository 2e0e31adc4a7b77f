"""Duplicate ids across shards without one Python set of every id: a hash-partitioned pass.

Pass 1 (per shard, parallel): each kept row's ``(id, shard, row)`` goes to bucket
``hash(id) % K`` — one small parquet file per (bucket, shard). Every copy of an id lands in
the same bucket, so pass 2 (per bucket, parallel) finds all duplicates looking at one bucket:
sort by ``(shard, row)`` and keep the first occurrence, as the stream order "first one wins"
rule of :func:`curation.data.validate.validate_documents` does. Memory per bucket is about
``N / K`` ids; the result (rows to drop) is only as large as the number of duplicates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from curation.cache import atomic_write


def bucket_of(ids: pd.Series, num_buckets: int) -> np.ndarray:
    """Stable bucket per id (pandas' fixed-key SipHash: the same in every process and run)."""
    return (pd.util.hash_array(ids.astype(str).to_numpy(dtype=object)) % np.uint64(num_buckets)).astype(np.int64)


def bucket_path(bucket_dir: str | Path, bucket: int, shard: str) -> Path:
    return Path(bucket_dir) / f"bucket-{bucket:04d}" / f"{shard}.parquet"


def partition_ids(ids: pd.Series, *, shard: str, shard_index: int, bucket_dir: str | Path,
                  num_buckets: int) -> None:
    """Write this shard's ids (in row order) into its per-bucket files (atomically, every bucket,
    empty ones too, so a bucket's file set is complete once the shard is)."""
    frame = pd.DataFrame({
        "id": ids.astype(str).to_numpy(dtype=object),
        "shard": np.full(len(ids), shard_index, dtype=np.int32),
        "row": np.arange(len(ids), dtype=np.int64),
    })
    buckets = bucket_of(frame["id"], num_buckets)
    for b in range(num_buckets):
        part = frame[buckets == b]
        atomic_write(bucket_path(bucket_dir, b, shard), lambda p, part=part: part.to_parquet(p, index=False))


def duplicates_in_bucket(bucket_dir: str | Path, bucket: int, shards: Sequence[str]) -> pd.DataFrame:
    """``(shard, row)`` of every later copy of an id in one bucket (the first copy is kept)."""
    parts = [pd.read_parquet(bucket_path(bucket_dir, bucket, s)) for s in shards]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["id", "shard", "row"])
    frame = frame.sort_values(["shard", "row"], kind="stable")
    dup = frame[frame["id"].duplicated(keep="first")]
    return dup[["shard", "row"]].reset_index(drop=True)


def find_duplicates(bucket_dir: str | Path, shards: Sequence[str], num_buckets: int) -> dict[int, np.ndarray]:
    """Rows to drop as ``dropped_duplicate_id``: shard index -> sorted row numbers."""
    found = [duplicates_in_bucket(bucket_dir, b, shards) for b in range(num_buckets)]
    found = [f for f in found if len(f)]
    if not found:
        return {}
    allrows = pd.concat(found, ignore_index=True)
    return {int(s): np.sort(g["row"].to_numpy()) for s, g in allrows.groupby("shard")}
