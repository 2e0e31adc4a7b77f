"""Exact dedup, MinHash near-dedup and benchmark decontamination inside the sharded ingest
(:mod:`curation.data.ingest`); the algorithms are in :mod:`curation.dedup`.

Per shard, in the validate pass, on the rows that passed validation:

1. **contamination** (``decontaminate: drop | flag``): each document's 13-grams are looked up in the
   evaluation tasks' n-gram index; ``drop`` rejects an overlapping document as ``contaminated`` (its
   ``task``: the task it shares the most n-grams with), ``flag`` keeps it with ``contaminated_task``.
2. **exact**: the normalised text's 128-bit hash goes to its bucket on disk.
3. **fuzzy**: the MinHash signature is written as an ``.npy`` shard and its band keys go to their buckets.

After every shard (per bucket), with "first in (shard, row) order wins" at every step: duplicate ids
(:mod:`curation.shards.dedup`), then ``exact_duplicate`` among the rest, then ``near_duplicate`` among
what is left (candidate pairs, verified, connected components). Each rejection names ``duplicate_of``:
the id of the document kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from curation.dedup.contamination import NgramIndex, contaminated
from curation.dedup.exact import exact_duplicates, partition_texts
from curation.dedup.fuzzy import candidate_pairs, components, partition_bands, verify_pairs
from curation.dedup.minhash import MinHashParams, has_signature, signatures
from curation.dedup.text import Tokens

DEDUP_REASONS = ("contaminated", "exact_duplicate", "near_duplicate")
FLAG_COLUMN = "contaminated_task"
MODES = ("drop", "flag", "off")
BLOCK_DOCS = 1024  # documents tokenised at once in the validate pass


@dataclass(frozen=True)
class DedupSettings:
    """What the ingest removes beyond validation (see the module docstring)."""

    exact: bool = True
    fuzzy: bool = True
    minhash: MinHashParams = field(default_factory=MinHashParams)
    threshold: float = 0.8  # Jaccard similarity of 5-gram shingle sets at or above which two are near-duplicates
    verify: bool = True  # check candidate pairs by exact Jaccard (False: every LSH candidate pair counts)
    decontaminate: str = "off"  # drop | flag | off
    index_path: str | None = None  # the decontamination n-gram index (.npz), required unless off
    index_key: str = ""  # its key (tasks, n, versions): enters the config digest

    def __post_init__(self) -> None:
        if self.decontaminate not in MODES:
            raise ValueError(f"decontaminate must be one of {MODES}, got {self.decontaminate!r}")
        if self.decontaminate != "off" and not self.index_path:
            raise ValueError("decontaminate needs index_path (the n-gram index of the evaluation tasks)")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")

    def digest(self) -> dict:
        out = asdict(self)
        out.pop("index_path")  # where it is cached does not change the result; its key does
        return out


@lru_cache(maxsize=2)
def _index(path: str) -> NgramIndex:
    return NgramIndex.load(Path(path))


def _empty_columns(frame: pd.DataFrame) -> pd.DataFrame:
    for col in ("duplicate_of", "task"):
        if col not in frame.columns:
            frame[col] = pd.Series([None] * len(frame), dtype="string")
    return frame


def pass1(kept: pd.DataFrame, rejected: pd.DataFrame, stats: dict, *, settings: DedupSettings, shard: str,
          shard_index: int, source_file: str, work: Path, num_buckets: int) -> tuple[pd.DataFrame, pd.DataFrame, dict, np.ndarray]:
    """Contamination, then the exact and band buckets of one validated shard. ``kept`` still has its
    ``_row`` (and ``_line``) columns; returns the new ``kept, rejected, stats`` and the signatures."""
    stats = dict(stats)
    rejected = _empty_columns(rejected)
    task, sigs = _per_document(kept["text"].astype(str).tolist(), settings)
    keep = np.ones(len(kept), dtype=bool)
    if settings.decontaminate != "off":
        index = _index(str(settings.index_path))
        names = np.array(index.tasks + [None], dtype=object)[task]  # -1 -> None
        for t, n in pd.Series(names[task >= 0]).value_counts().items():
            stats[f"contaminated_{t}"] = int(n)
        if settings.decontaminate == "drop":
            keep = task < 0
            hit = kept[~keep]
            moved = pd.DataFrame({
                "id": hit["id"].astype("string").to_numpy(), "reason": pd.Series(["contaminated"] * len(hit), dtype="string"),
                "source_file": pd.Series([source_file] * len(hit), dtype="string"),
                "row": hit["_row"].to_numpy(np.int64),
                "line": (hit["_line"].astype("Int64").to_numpy() if "_line" in hit.columns
                         else pd.array([None] * len(hit), dtype="Int64")),
                "_row": hit["_row"].to_numpy(np.int64),
                "duplicate_of": pd.Series([None] * len(hit), dtype="string"),
                "task": pd.Series(names[~keep], dtype="string"),
            })
            moved["id"] = moved["id"].astype("string")
            rejected = pd.concat([rejected, moved], ignore_index=True).sort_values("_row", kind="stable")
            rejected = rejected.reset_index(drop=True)
            n_hit = int((~keep).sum())
            stats["dropped_contaminated"] = n_hit
            stats["rows_kept"] = stats["rows_kept"] - n_hit
            stats["rows_dropped"] = stats.get("rows_dropped", 0) + n_hit
            kept = kept[keep].reset_index(drop=True)
        else:
            kept = kept.assign(**{FLAG_COLUMN: pd.Series(names, dtype="string").to_numpy()})
            stats["flagged_contaminated"] = int((task >= 0).sum())
    if settings.exact:
        partition_texts(kept["text"].astype(str), kept["id"], shard=shard, shard_index=shard_index,
                        bucket_dir=work / "exact_buckets", num_buckets=num_buckets)
    if settings.fuzzy:
        sigs = sigs[keep]
        # documents without a word (only punctuation or symbols) have no shingle: no near-duplicate test
        stats["minhash_no_words"] = int((~has_signature(sigs)).sum())
        partition_bands(sigs, settings.minhash, shard=shard, shard_index=shard_index,
                        bucket_dir=work / "fuzzy_buckets", num_buckets=num_buckets)
    return kept, rejected, stats, sigs


def _per_document(texts: list[str], settings: DedupSettings) -> tuple[np.ndarray, np.ndarray]:
    """Contamination task index (-1: clean) and MinHash signature of each text, computed in blocks of
    :data:`BLOCK_DOCS` documents so that memory is bounded by the block, not the shard."""
    task = np.full(len(texts), -1, dtype=np.int64)
    sigs = np.empty((len(texts) if settings.fuzzy else 0, settings.minhash.num_perm), dtype=np.uint32)
    if not settings.fuzzy and settings.decontaminate == "off":
        return task, sigs
    for start in range(0, len(texts), BLOCK_DOCS):
        tokens = Tokens.of(texts[start:start + BLOCK_DOCS])
        stop = start + len(tokens)
        if settings.decontaminate != "off":
            task[start:stop] = contaminated(tokens, _index(str(settings.index_path)))[0]
        if settings.fuzzy:
            sigs[start:stop] = signatures(tokens, settings.minhash)
    return task, sigs


def find_text_drops(work: Path, names: Sequence[str], num_buckets: int, settings: DedupSettings,
                    id_drops: dict[int, np.ndarray]) -> tuple[dict[int, pd.DataFrame], dict[str, int]]:
    """Every row to drop after pass 1: duplicate ids (given), then exact, then near duplicates, each
    leaving out the rows dropped before. Returns ``shard index -> frame (row, reason, duplicate_of)``
    sorted by row, and the LSH counts."""
    parts = [pd.DataFrame({"shard": np.full(len(rows), i, np.int64), "row": np.asarray(rows, np.int64),
                           "reason": "duplicate_id", "duplicate_of": None}) for i, rows in id_drops.items()]
    counts: dict[str, int] = {}

    def excluded() -> pd.DataFrame | None:
        return pd.concat([p[["shard", "row"]] for p in parts], ignore_index=True) if parts else None

    if settings.exact:
        exact = exact_duplicates(work / "exact_buckets", names, num_buckets, excluded())
        parts.append(exact.assign(reason="exact_duplicate"))
    if settings.fuzzy:
        pairs = candidate_pairs(work / "fuzzy_buckets", names, num_buckets, excluded())
        counts["lsh_candidate_pairs"] = len(pairs)
        if settings.verify:
            pairs, verified = verify_pairs(
                pairs, settings.minhash, settings.threshold,
                signatures_of=lambda s: np.load(work / "signatures" / "shards" / f"{names[s]}.npy"),
                texts_of=lambda s, rows: _validated(work, names[s], "text").iloc[rows].astype(str).tolist())
            counts.update(verified)
        near = components(pairs)
        if len(near):
            ids = []
            for s, group in near.groupby("keep_shard"):
                id_col = _validated(work, names[int(s)], "id").to_numpy(dtype=object)
                ids.append(pd.Series(id_col[group["keep_row"].to_numpy()], index=group.index))
            near["duplicate_of"] = pd.concat(ids)
        parts.append(near[["shard", "row"]].assign(reason="near_duplicate",
                                                   duplicate_of=near.get("duplicate_of", pd.Series(dtype=object))))
    if not parts:
        return {}, counts
    allrows = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else None
    if allrows is None:
        return {}, counts
    return {int(s): g.sort_values("row")[["row", "reason", "duplicate_of"]].reset_index(drop=True)
            for s, g in allrows.groupby("shard")}, counts


def _validated(work: Path, name: str, column: str) -> pd.Series:
    return pd.read_parquet(work / "validated" / "shards" / f"{name}.parquet", columns=[column])[column]
