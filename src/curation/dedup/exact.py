"""Exact deduplication of normalised text, on shards with hash buckets on disk (Lee et al. 2022,
"Deduplicating Training Data Makes Language Models Better", exact-substring's document-level special
case; NeMo Curator's and datatrove's exact stage).

Each document's :func:`curation.dedup.text.normalize`\\ d text is hashed to 128 bits (BLAKE2b; at a
billion documents the chance of any collision is ~1e-21). Pass 1 (per shard): ``(h1, h2, id, shard,
row)`` of every kept row goes to bucket ``h1 % K``, one parquet file per (bucket, shard), as the id
dedup does (:mod:`curation.shards.dedup`). Pass 2 (per bucket): every copy of a text is in one bucket;
sorted by ``(shard, row)``, the first copy is kept and every later one is dropped as
``exact_duplicate`` of the first one's id. Memory per bucket is ~N / K rows.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from curation.cache import atomic_write
from curation.dedup.text import normalize


def text_hashes(texts: Iterable[str]) -> np.ndarray:
    """``(n, 2)`` uint64: the 128-bit BLAKE2b hash of each normalised text."""
    raw = b"".join(hashlib.blake2b(normalize(t).encode("utf-8", "surrogatepass"), digest_size=16).digest()
                   for t in texts)
    return np.frombuffer(raw, dtype="<u8").reshape(-1, 2).copy()


def bucket_path(bucket_dir: str | Path, bucket: int, shard: str) -> Path:
    return Path(bucket_dir) / f"bucket-{bucket:04d}" / f"{shard}.parquet"


def write_buckets(frame: pd.DataFrame, keys: np.ndarray, *, shard: str, bucket_dir: str | Path,
                  num_buckets: int) -> None:
    """Write ``frame``'s rows to bucket ``keys % num_buckets``: one file per bucket (empty ones too, so
    a bucket's file set is complete once the shard is), each written atomically."""
    buckets = (np.asarray(keys, dtype=np.uint64) % np.uint64(num_buckets)).astype(np.int64)
    for bucket in range(num_buckets):
        part = frame[buckets == bucket].reset_index(drop=True)
        atomic_write(bucket_path(bucket_dir, bucket, shard), lambda p, part=part: part.to_parquet(p, index=False))


def read_bucket(bucket_dir: str | Path, bucket: int, shards: Sequence[str]) -> pd.DataFrame:
    parts = [pd.read_parquet(bucket_path(bucket_dir, bucket, s)) for s in shards]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def partition_texts(texts: pd.Series, ids: pd.Series, *, shard: str, shard_index: int, bucket_dir: str | Path,
                    num_buckets: int) -> None:
    """Pass 1 for one shard: its rows' text hashes (in row order) into their buckets."""
    hashes = text_hashes(texts.tolist())
    frame = pd.DataFrame({
        "h1": hashes[:, 0], "h2": hashes[:, 1], "id": ids.astype(str).to_numpy(dtype=object),
        "shard": np.full(len(ids), shard_index, dtype=np.int32), "row": np.arange(len(ids), dtype=np.int64),
    })
    write_buckets(frame, hashes[:, 0], shard=shard, bucket_dir=bucket_dir, num_buckets=num_buckets)


def without(frame: pd.DataFrame, excluded: pd.DataFrame | None) -> pd.DataFrame:
    """``frame`` less the rows whose ``(shard, row)`` is in ``excluded`` (rows already dropped)."""
    if excluded is None or not len(excluded) or not len(frame):
        return frame
    key = frame["shard"].to_numpy(np.int64) << 32 | frame["row"].to_numpy(np.int64)
    gone = excluded["shard"].to_numpy(np.int64) << 32 | excluded["row"].to_numpy(np.int64)
    return frame[~np.isin(key, gone)]


def exact_duplicates(bucket_dir: str | Path, shards: Sequence[str], num_buckets: int,
                     excluded: pd.DataFrame | None = None) -> pd.DataFrame:
    """Pass 2: ``shard, row, duplicate_of`` of every later copy of a normalised text (the first copy in
    ``(shard, row)`` order is kept), leaving out the rows in ``excluded`` (``shard, row``)."""
    found = []
    for bucket in range(num_buckets):
        frame = without(read_bucket(bucket_dir, bucket, shards), excluded)
        if not len(frame):
            continue
        frame = frame.sort_values(["shard", "row"], kind="stable")
        first = frame.groupby(["h1", "h2"], sort=False)["id"].transform("first")
        dup = frame[["h1", "h2"]].duplicated(keep="first")
        found.append(pd.DataFrame({"shard": frame["shard"][dup].to_numpy(np.int64),
                                   "row": frame["row"][dup].to_numpy(np.int64),
                                   "duplicate_of": first[dup].to_numpy(dtype=object)}))
    if not found:
        return pd.DataFrame({"shard": np.empty(0, np.int64), "row": np.empty(0, np.int64),
                             "duplicate_of": np.empty(0, dtype=object)})
    return pd.concat(found, ignore_index=True)
