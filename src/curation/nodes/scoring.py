"""Scoring nodes: sentence embeddings, then every rater and the merged 0-15 quality.

Both are cached (``curation.cache``): a re-run with the same documents and
config loads the previous result instead of recomputing it.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from curation.cache import ResultCache, array_digest, config_key, frame_fingerprint
from curation.paths import project_root
from curation.reporting.plots import plot_length_distribution, plot_quality_histogram, plot_spearman_heatmap

log = logging.getLogger(__name__)


def _cache(cache: dict[str, Any]) -> ResultCache:
    directory = Path(cache["dir"])
    if not directory.is_absolute():
        directory = project_root() / directory
    return ResultCache(directory, enabled=bool(cache["enabled"]))


def embed_documents(documents: pd.DataFrame, embedding: dict[str, Any],
                    cache: dict[str, Any]) -> tuple[np.ndarray, dict[str, float]]:
    """One L2-normalised embedding row per document, in document order."""
    from curation.embedding import EmbedderConfig, make_embedder

    config = EmbedderConfig(**embedding)
    store = _cache(cache)
    # The progress bar is the one knob that does not change the vectors.
    key = config_key("embeddings-v1", {k: v for k, v in embedding.items() if k != "show_progress"},
                     frame_fingerprint(documents, ["id", "text"]))
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
    """Train and apply the configured raters; return ``scores`` (``id`` + one column per
    score + ``quality`` in [0, 15]), ``scoring_metrics`` (ROC-AUC per rater on the held-out
    human labels, counts of empty texts and NaN scores, timings), the share per integer
    quality score (DATAMASK Table 6 analogue) and ``rater_models``, the fitted raters
    (a ``RaterFolder``; the catalog saves it to ``data/06_models`` and MLflow).

    The raters are cached with the scores (``raters-<key>/`` beside ``scores-<key>.parquet``),
    so a cache hit still hands the models on."""
    from curation.scoring import merge
    from curation.scoring.config import scoring_config_from_dict
    from curation.scoring.persistence import MANIFEST, RaterFolder, write_raters_atomically
    from curation.scoring.run import score_corpus

    config = scoring_config_from_dict(scoring)
    store = _cache(cache)
    embeddings = np.asarray(embeddings, dtype=np.float32)
    # v2: the fitted raters are cached too (v1 entries have none)
    key = config_key("scores-v2", scoring, frame_fingerprint(documents, ["id", "text"]),
                     array_digest(embeddings))
    metrics_path = store.directory / f"scores-{key}.metrics.json"
    raters_dir = store.directory / f"raters-{key}"
    scores_path = store.directory / f"scores-{key}.parquet"  # ResultCache's <name>-<key>.<ext>
    if store.enabled and scores_path.exists() and not (raters_dir / MANIFEST).exists():
        log.warning("cached scores %s have no raters folder: recomputing both", scores_path.name)
        scores_path.unlink()
    computed: dict[str, float] = {}
    fitted: dict[str, Any] = {}
    meta = {"scores_key": key, "documents": len(documents), "scoring": scoring}

    def compute() -> pd.DataFrame:
        result = score_corpus(documents, config, embeddings=embeddings)
        computed.update(result.metrics)
        fitted.update(result.raters)
        if store.enabled:  # before the scores file, so a cached score always has its raters
            write_raters_atomically(result.raters, raters_dir, meta)
        return result.scores

    scores = store.frame("scores", key, compute)
    if computed and store.enabled:
        metrics_path.write_text(json.dumps(computed))
    metrics = computed or (json.loads(metrics_path.read_text()) if metrics_path.exists() else {})
    metrics = {k.replace("/", "_"): float(v) for k, v in metrics.items()}
    metrics["scoring_cache_hit"] = float(store.hits)
    share = merge.quality_share(scores["quality"]) if "quality" in scores else pd.DataFrame()
    if "quality" in scores:
        metrics["quality_mean"] = float(np.nanmean(scores["quality"]))
        metrics["quality_nan"] = float(scores["quality"].isna().sum())
    fresh = bool(computed)
    models = RaterFolder(directory=raters_dir, fresh=fresh) if store.enabled else RaterFolder(raters=fitted, meta=meta)
    return scores, metrics, share, models


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
