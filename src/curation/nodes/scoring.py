"""Scoring nodes: sentence embeddings, then every rater and the merged 0-15 quality, on shards.

Both stages stream shard by shard (:mod:`curation.embedding.sharded`,
:mod:`curation.scoring.sharded`) in a stage folder of the result cache
(:mod:`curation.scoring.cached`): a re-run with the same documents and config is a
cache hit, a killed run resumes at its first unfinished shard.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd

from curation.reporting.plots import plot_length_distribution, plot_quality_histogram, plot_spearman_heatmap
from curation.shards import ShardedDataset

log = logging.getLogger(__name__)

PLOT_SAMPLE_DOCS = 20_000  # documents the Spearman heatmap is drawn from
# documents whose token lengths are plotted: tokenising is the plot's whole cost (~1,300 docs/s on 2
# cores: 20,000 took 16 s of a 75 s scoring stage at 100k); 4,000 put each percentile of a source's
# length distribution within a few tokens for sources of >= 5% of the corpus
PLOT_TOKEN_DOCS = 4_000


def _namespace(run: dict[str, Any] | None) -> str:
    return str((run or {}).get("namespace") or "default")


def embed_documents(documents: ShardedDataset, embedding: dict[str, Any], cache: dict[str, Any],
                    data: dict[str, Any] | None = None,
                    run: dict[str, Any] | None = None) -> tuple[ShardedDataset, dict[str, float]]:
    """One L2-normalised embedding row per document, sharded like ``documents`` (``data.engine``)."""
    from curation.cache import config_key
    from curation.configuration import parse_dataclass
    from curation.embedding import EmbedderConfig
    from curation.embedding.sharded import embed_shards, embedding_digest
    from curation.scoring.cached import stage_folder
    from curation.scoring.sharded import engine_of

    config = parse_dataclass(EmbedderConfig, embedding, path="embedding")
    key = config_key(embedding_digest(config), documents.fingerprint)
    folder, keep = stage_folder(cache, "embeddings", key, _namespace(run))
    started = time.perf_counter()
    vectors, hit = embed_shards(documents, config, folder, engine_of(None, data), keep=keep)
    stats = vectors.manifest.stats
    width = vectors.array(vectors.names[0]).shape[1] if vectors.names else config.dim
    metrics = {"embedding_dim": float(width), "embedding_docs": float(len(vectors)),
               "embedding_cache_hit": float(hit), "embedding_wall_seconds": time.perf_counter() - started,
               "embedding_shards": float(len(vectors.names))}
    for key_ in ("embedding_seconds", "embedding_empty_text", "embedding_zero_vector"):
        if key_ in stats:
            metrics[key_] = float(stats[key_])
    if stats.get("embedding_seconds"):
        metrics["embedding_docs_per_s"] = float(stats.get("embedding_docs", 0)) / float(stats["embedding_seconds"])
    return vectors, metrics


def score_documents(
    documents: ShardedDataset, embeddings: ShardedDataset, scoring: dict[str, Any], cache: dict[str, Any],
    data: dict[str, Any] | None = None, run: dict[str, Any] | None = None, embedding: dict[str, Any] | None = None,
) -> tuple[ShardedDataset, dict[str, float], pd.DataFrame, Any]:
    """Fit the configured raters on a sample and score every shard
    (:func:`curation.scoring.cached.score_cached`): ``scores`` (sharded, aligned with ``documents``),
    ``scoring_metrics``, the quality share table and ``rater_models``, the fitted raters (a
    ``RaterFolder``; the catalog saves it to ``data/06_models`` and MLflow). ``embedding``: the
    vector space the reference Edu / Wiki heads are trained in (``scoring.training.source=reference``)."""
    from curation.scoring.cached import score_cached

    return score_cached(documents, embeddings, scoring, cache, data, _namespace(run), embedding)


def plot_scores(scores: ShardedDataset, documents: ShardedDataset, quality_share_table: pd.DataFrame,
                embedding: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The Spearman heatmap among raters (on a hash-chosen sample of ``PLOT_SAMPLE_DOCS``) and the
    token lengths per source (``PLOT_TOKEN_DOCS`` of them); the quality distribution of every document."""
    from curation.data.stats import token_lengths
    from curation.embedding.embedder import packaged_tokenizer_path
    from curation.pruning import quality_histogram
    from curation.scoring.sample import sample_mask, sample_threshold
    from curation.scoring.sharded import quality_values

    threshold = sample_threshold((documents.read(n, ["id"])["id"] for n in documents.names), PLOT_SAMPLE_DOCS)
    doc_parts, score_parts = [], []
    for name in documents.names:
        docs = documents.read(name, [c for c in ("id", "text", "source") if c in documents.manifest.schema])
        mask = sample_mask(docs["id"], threshold)
        doc_parts.append(docs[mask])
        score_parts.append(scores.read(name)[mask])
    sample_docs = pd.concat(doc_parts, ignore_index=True)
    sample_scores = pd.concat(score_parts, ignore_index=True)

    # the token-length sample is the heatmap's sample cut by the same id hash (a subset of it)
    token_docs = sample_docs[sample_mask(sample_docs["id"], sample_threshold([sample_docs["id"]], PLOT_TOKEN_DOCS))]
    lengths = token_lengths(token_docs["text"].tolist(), packaged_tokenizer_path())
    sources = token_docs["source"].astype("string").fillna("unknown").to_numpy() if "source" in token_docs \
        else np.array(["unknown"] * len(token_docs))
    heatmap = plot_spearman_heatmap(sample_scores.drop(columns=["id"]))
    quality = plot_quality_histogram(quality_histogram(quality_values(scores)),
                                     title="merged quality (0-15), DATAMASK Table 6 analogue")
    lengths_plot = plot_length_distribution(lengths, sources, unit="MiniLM tokens")
    return heatmap, quality, lengths_plot
