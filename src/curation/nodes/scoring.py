"""Scoring nodes: sentence embeddings, then every rater and the merged 0-15 quality.

Both are cached (``curation.cache``): a re-run with the same documents and
config loads the previous result instead of recomputing it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd

from curation.cache import config_key, frame_fingerprint, result_cache
from curation.reporting.plots import plot_length_distribution, plot_quality_histogram, plot_spearman_heatmap

log = logging.getLogger(__name__)


def embed_documents(documents: pd.DataFrame, embedding: dict[str, Any],
                    cache: dict[str, Any]) -> tuple[np.ndarray, dict[str, float]]:
    """One L2-normalised embedding row per document, in document order."""
    from curation.configuration import parse_dataclass
    from curation.embedding import EmbedderConfig, make_embedder, model_fingerprint

    config = parse_dataclass(EmbedderConfig, embedding, path="embedding")
    store = result_cache(cache)
    # The progress bar is the one knob that does not change the vectors.
    key = config_key("embeddings-v1", {k: v for k, v in embedding.items() if k != "show_progress"},
                     model_fingerprint(config), frame_fingerprint(documents, ["id", "text"]))
    timing: dict[str, float] = {}

    def compute() -> np.ndarray:
        result = make_embedder(config).encode(documents["text"].tolist())
        timing.update({"embedding_docs_per_s": float(result.docs_per_s), "embedding_seconds": float(result.seconds),
                       "embedding_empty_text": float(result.n_empty)})
        return result.embeddings

    started = time.perf_counter()
    vectors = store.array("embeddings", key, compute)
    metrics = {"embedding_dim": float(vectors.shape[1]), "embedding_docs": float(len(vectors)),
               "embedding_cache_hit": float(store.hits), "embedding_wall_seconds": time.perf_counter() - started,
               **timing}
    return vectors, metrics


def score_documents(
    documents: pd.DataFrame, embeddings: np.ndarray, scoring: dict[str, Any], cache: dict[str, Any]
) -> tuple[pd.DataFrame, dict[str, float], pd.DataFrame, Any]:
    """Train and apply the configured raters (:func:`curation.scoring.cached.score_cached`): ``scores``,
    ``scoring_metrics``, the quality share table and ``rater_models``, the fitted raters (a
    ``RaterFolder``; the catalog saves it to ``data/06_models`` and MLflow)."""
    from curation.scoring.cached import score_cached

    return score_cached(documents, embeddings, scoring, cache)


def plot_scores(scores: pd.DataFrame, documents: pd.DataFrame, quality_share_table: pd.DataFrame,
                embedding: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The Spearman heatmap among raters, the quality distribution and token lengths per source."""
    from tokenizers import Tokenizer

    from curation.embedding.embedder import packaged_tokenizer_path
    from curation.pruning import quality_histogram

    tokenizer = Tokenizer.from_file(packaged_tokenizer_path())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    lengths = np.array([len(e.ids) for e in tokenizer.encode_batch(documents["text"].tolist())])
    sources = documents["source"].astype("string").fillna("unknown").to_numpy() if "source" in documents \
        else np.array(["unknown"] * len(documents))
    heatmap = plot_spearman_heatmap(scores.drop(columns=["id"]))
    quality = plot_quality_histogram(quality_histogram(scores["quality"].to_numpy(dtype="float64")),
                                     title="merged quality (0-15), DATAMASK Table 6 analogue")
    lengths_plot = plot_length_distribution(lengths, sources, unit="MiniLM tokens")
    return heatmap, quality, lengths_plot
