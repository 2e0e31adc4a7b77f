"""The fit sample: a bounded, deterministic, shard-spread choice of documents.

The raters and the 0-15 merge map are fitted on at most ``scoring.fit_sample_docs``
documents. Which ones is decided by a keyed hash of the document id (pandas'
SipHash, the same in every process): the ``k`` documents with the smallest hash.
So the sample does not depend on how the corpus is cut into shards (every shard
contributes about its share) nor on the engine, and a corpus of at most ``k``
documents is fitted on every document, in document order.

Choosing the threshold holds one 8-byte hash per document (the "8 bytes/doc"
global arrays the sharded data flow allows); the sample itself is read shard by
shard afterwards.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

HASH_KEY = "curation-fit-smp"  # 16 characters: pandas' SipHash key; change it to draw another sample


def id_hashes(ids: pd.Series) -> np.ndarray:
    """uint64 hash per id (stable across processes and runs)."""
    return pd.util.hash_array(pd.Series(ids).astype(str).to_numpy(dtype=object), hash_key=HASH_KEY)


def sample_threshold(id_batches: Iterable[pd.Series], k: int) -> int | None:
    """The largest hash in the sample of ``k`` documents, or None when every document is in it."""
    hashes = [id_hashes(ids) for ids in id_batches]
    total = sum(len(h) for h in hashes)
    if total <= k:
        return None
    allh = np.concatenate(hashes)
    return int(np.partition(allh, k - 1)[k - 1])


def sample_mask(ids: pd.Series, threshold: int | None) -> np.ndarray:
    """True for the rows of ``ids`` in the sample."""
    if threshold is None:
        return np.ones(len(ids), dtype=bool)
    return id_hashes(ids) <= np.uint64(threshold)
