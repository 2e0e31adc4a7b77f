"""Sharded pruning/selection inputs from the bundled corpus, in the layout of issue #14's contract:
``documents`` (frame shards), ``scores`` (id + quality) and ``embeddings`` (float32) with the same
shard names and row counts, ``aligned_with`` = the documents' fingerprint.

Real data: the first documents of the bundled corpus, embedded by the distilled static embedder;
``quality`` is a real, reproducible rater on the 0-15 scale (log2 of the word count, rounded: many
ties, which the pruning and top-k tie rules need), with a few NaN scores injected (counted by pruning).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from curation.shards import ShardedDataset, ShardWriter, shard_names

CORPUS = Path(__file__).resolve().parents[1] / "data" / "01_raw" / "corpus"


@lru_cache(maxsize=2)
def corpus_frames(n: int = 1200) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """(documents, scores, embeddings) of the first ``n`` corpus documents."""
    from curation.embedding import EmbedderConfig, make_embedder

    docs = pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[0]).iloc[:n][["id", "text"]].reset_index(drop=True)
    docs["id"] = docs["id"].astype(str)
    words = docs["text"].str.split().str.len().to_numpy(dtype="float64")
    quality = np.clip(np.round(np.log2(np.maximum(words, 1))), 0, 15)
    quality[[i for i in (3, 40, 41, 777) if i < n]] = np.nan  # injected: documents no rater could score
    scores = pd.DataFrame({"id": docs["id"], "quality": quality})
    embedder = make_embedder(EmbedderConfig(backend="static", dim=256, pca_dims=256, show_progress=False,
                                            num_threads=1, num_workers=1))
    result = embedder.encode(docs["text"].tolist())
    vectors = np.asarray(getattr(result, "embeddings", result), dtype=np.float32)
    return docs, scores, vectors


def write_frame(frame: pd.DataFrame, root: Path, cuts: list[np.ndarray], stage: str, **manifest) -> ShardedDataset:
    writer = ShardWriter(root, "frame")
    names = shard_names(len(cuts))
    for name, rows in zip(names, cuts):
        writer.mark_complete(writer.write(name, frame.iloc[rows]))
    writer.finalize(names, stage=stage, **manifest)
    return ShardedDataset(root)


def write_array(array: np.ndarray, root: Path, cuts: list[np.ndarray], stage: str, **manifest) -> ShardedDataset:
    writer = ShardWriter(root, "array")
    names = shard_names(len(cuts))
    for name, rows in zip(names, cuts):
        writer.mark_complete(writer.write(name, array[rows]))
    writer.finalize(names, stage=stage, **manifest)
    return ShardedDataset(root)


def sharded_inputs(root: Path, n_shards: int, n: int = 1200, sizes: list[int] | None = None):
    """Write documents/scores/embeddings as ``n_shards`` uneven shards under ``root``; returns the
    three ShardedDatasets and the whole frames."""
    docs, scores, vectors = corpus_frames(n)
    if sizes is None:
        rng = np.random.default_rng(n_shards)
        weights = rng.uniform(0.5, 1.5, n_shards)
        bounds = np.round(np.cumsum(weights) / weights.sum() * len(docs)).astype(int)
        sizes = np.diff(np.concatenate([[0], bounds])).tolist()
    cuts = np.split(np.arange(len(docs)), np.cumsum(sizes)[:-1])
    documents = write_frame(docs, root / "documents", cuts, "ingest")
    fp = documents.fingerprint
    scored = write_frame(scores, root / "scores", cuts, "scoring", inputs={"documents": fp}, aligned_with=fp)
    embedded = write_array(vectors, root / "embeddings", cuts, "scoring", inputs={"documents": fp}, aligned_with=fp)
    return documents, scored, embedded, (docs, scores, vectors)
