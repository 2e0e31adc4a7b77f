"""Fuzzy deduplication: MinHash + LSH on shards, band buckets on disk, union-find over the verified
candidate pairs, one survivor per connected component (Broder 1997; Lee et al. 2022, NearDup;
datatrove's four MinHash stages: signatures, buckets, cluster, filter).

1. **signatures** (per shard, in the ingest validate pass): :func:`curation.dedup.minhash.signatures`,
   kept as an ``.npy`` shard; each document's ``bands`` band keys go to bucket ``key % K`` on disk
   (one parquet file per (bucket, shard): ``band, key, shard, row``).
2. **buckets** (per bucket): documents with an equal key in the same band are candidates; each is
   paired with the group's earliest member in ``(shard, row)`` order (a star, not every pair: the
   components are the same). Rows already dropped (duplicate ids, exact copies) are left out first.
3. **verify**: a candidate pair whose signatures agree in every value is accepted (at Jaccard 0.8 all
   112 agree with probability 0.8^112 ~ 1e-11); any other pair is accepted only if the exact Jaccard
   similarity of the two documents' 5-gram shingle sets is at least ``threshold`` (texts re-read,
   one pair of shards at a time). This removes the LSH false positives of the S-curve's shoulder
   (56 % of pairs at Jaccard 0.7 are candidates with 14 x 8 bands).
4. **cluster**: connected components of the accepted pairs (scipy's union-find equivalent); in each,
   the earliest document is kept and every other one is dropped as ``near_duplicate`` of it. (A chain
   a~b~c drops c as a duplicate of a even if a and c are less similar than the threshold: as datatrove
   and NeMo Curator do.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from curation.dedup.exact import read_bucket, without, write_buckets
from curation.dedup.minhash import MinHashParams, band_keys, has_signature
from curation.dedup.text import Tokens

EDGE_COLUMNS = ("shard_a", "row_a", "shard_b", "row_b")


def partition_bands(sigs: np.ndarray, params: MinHashParams, *, shard: str, shard_index: int,
                    bucket_dir: str | Path, num_buckets: int) -> None:
    """Pass 1 for one shard: the band keys of every document with a signature into their buckets."""
    rows = np.flatnonzero(has_signature(sigs)).astype(np.int64)
    keys = band_keys(sigs[rows], params.bands, params.rows)  # (docs, bands)
    frame = pd.DataFrame({
        "band": np.tile(np.arange(params.bands, dtype=np.int16), len(rows)),
        "key": keys.reshape(-1),
        "shard": np.full(len(rows) * params.bands, shard_index, dtype=np.int32),
        "row": np.repeat(rows, params.bands),
    })
    write_buckets(frame, frame["key"].to_numpy(), shard=shard, bucket_dir=bucket_dir, num_buckets=num_buckets)


def candidate_pairs(bucket_dir: str | Path, shards: Sequence[str], num_buckets: int,
                    excluded: pd.DataFrame | None = None) -> pd.DataFrame:
    """Pass 2: ``shard_a, row_a, shard_b, row_b`` (a earlier than b) of every document that shares a band
    with an earlier one, paired with the earliest member of that band group; unique pairs."""
    found = []
    for bucket in range(num_buckets):
        frame = without(read_bucket(bucket_dir, bucket, shards), excluded)
        if not len(frame):
            continue
        frame = frame.sort_values(["band", "key", "shard", "row"], kind="stable")
        later = frame[["band", "key"]].duplicated(keep="first").to_numpy()
        if not later.any():
            continue
        group = frame.groupby(["band", "key"], sort=False)
        first_shard = group["shard"].transform("first").to_numpy()
        first_row = group["row"].transform("first").to_numpy()
        found.append(pd.DataFrame({"shard_a": first_shard[later].astype(np.int64),
                                   "row_a": first_row[later].astype(np.int64),
                                   "shard_b": frame["shard"].to_numpy()[later].astype(np.int64),
                                   "row_b": frame["row"].to_numpy()[later].astype(np.int64)}))
    if not found:
        return pd.DataFrame({c: np.empty(0, np.int64) for c in EDGE_COLUMNS})
    return pd.concat(found, ignore_index=True).drop_duplicates().sort_values(list(EDGE_COLUMNS)).reset_index(drop=True)


def shingle_sets(texts: Sequence[str], ngram: int) -> list[np.ndarray]:
    """Each text's set (sorted unique 64-bit hashes) of word ``ngram``-shingles, as the signatures see them."""
    tokens = Tokens.of(texts)
    grams, owner = tokens.ngrams(ngram, short="whole")
    cuts = np.searchsorted(owner, np.arange(len(tokens) + 1))
    return [np.unique(grams[cuts[i]:cuts[i + 1]]) for i in range(len(tokens))]


def set_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted unique hash arrays (two empty sets: 1)."""
    if not len(a) and not len(b):
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def verify_pairs(pairs: pd.DataFrame, params: MinHashParams, threshold: float, *,
                 signatures_of: Callable[[int], np.ndarray],
                 texts_of: Callable[[int, np.ndarray], list[str]]) -> tuple[pd.DataFrame, dict[str, int]]:
    """The candidate pairs that are near-duplicates: equal signatures, or exact shingle-set Jaccard >=
    ``threshold``. Pairs are taken one (shard_a, shard_b) group at a time, so at most two shards'
    signatures and the texts of their candidate rows are in memory. Returns the kept pairs (with a
    ``jaccard`` column: 1.0 for equal signatures) and counts."""
    if not len(pairs):
        return pairs.assign(jaccard=np.empty(0)), {"lsh_candidate_pairs": 0, "lsh_pairs_verified": 0,
                                                   "lsh_false_positive_pairs": 0}
    kept, checked, rejected = [], 0, 0
    sig_cache: dict[int, np.ndarray] = {}
    for (sa, sb), group in pairs.groupby(["shard_a", "shard_b"], sort=True):
        for s in list(sig_cache):
            if s not in (sa, sb):
                del sig_cache[s]
        for s in (sa, sb):
            if s not in sig_cache:
                sig_cache[s] = signatures_of(int(s))
        ra, rb = group["row_a"].to_numpy(), group["row_b"].to_numpy()
        same = np.all(sig_cache[sa][ra] == sig_cache[sb][rb], axis=1)
        jac = np.where(same, 1.0, np.nan)
        todo = np.flatnonzero(~same)
        if len(todo):
            checked += len(todo)
            rows_a, rows_b = np.unique(ra[todo]), np.unique(rb[todo])
            sets_a = dict(zip(rows_a.tolist(), shingle_sets(texts_of(int(sa), rows_a), params.ngram)))
            sets_b = dict(zip(rows_b.tolist(), shingle_sets(texts_of(int(sb), rows_b), params.ngram)))
            for i in todo:
                jac[i] = set_jaccard(sets_a[int(ra[i])], sets_b[int(rb[i])])
        ok = jac >= threshold
        rejected += int((~ok).sum())
        kept.append(group.assign(jaccard=jac)[ok])
    counts = {"lsh_candidate_pairs": len(pairs), "lsh_pairs_verified": checked, "lsh_false_positive_pairs": rejected}
    return pd.concat(kept, ignore_index=True), counts


def components(pairs: pd.DataFrame) -> pd.DataFrame:
    """Connected components of the pairs: ``shard, row, keep_shard, keep_row`` for every document of a
    component except its earliest (in ``(shard, row)`` order), which is the one kept."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    empty = pd.DataFrame({c: np.empty(0, np.int64) for c in ("shard", "row", "keep_shard", "keep_row")})
    if not len(pairs):
        return empty
    a = pairs["shard_a"].to_numpy(np.int64) << 32 | pairs["row_a"].to_numpy(np.int64)
    b = pairs["shard_b"].to_numpy(np.int64) << 32 | pairs["row_b"].to_numpy(np.int64)
    nodes, index = np.unique(np.concatenate([a, b]), return_inverse=True)
    ia, ib = index[: len(a)], index[len(a):]
    graph = coo_matrix((np.ones(len(a), dtype=np.int8), (ia, ib)), shape=(len(nodes), len(nodes)))
    _, label = connected_components(graph, directed=False)
    # nodes are sorted, so the first node of each label is its earliest document
    first = np.full(label.max() + 1, -1, dtype=np.int64)
    order = np.arange(len(nodes))[::-1]
    first[label[order]] = order  # last write wins = smallest index
    keep = nodes[first[label]]
    drop = nodes != keep
    return pd.DataFrame({"shard": nodes[drop] >> 32, "row": nodes[drop] & 0xFFFFFFFF,
                         "keep_shard": keep[drop] >> 32, "keep_row": keep[drop] & 0xFFFFFFFF})
