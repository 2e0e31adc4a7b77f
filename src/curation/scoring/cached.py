"""Scoring cached by content: every rater and the merged 0-15 quality, with the fitted raters.

A re-run with the same documents, embeddings and ``scoring`` config loads the
previous scores and raters from ``cache.dir`` (:mod:`curation.cache`) instead
of recomputing them. The raters are cached with the scores
(``raters-<key>/`` beside ``scores-<key>.parquet``, written first), so a cache
hit still hands the models on.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping

import numpy as np
import pandas as pd

from curation.cache import array_digest, config_key, frame_fingerprint, result_cache
from curation.scoring import merge
from curation.scoring.config import scoring_config_from_dict
from curation.scoring.persistence import MANIFEST, RaterFolder, write_raters_atomically
from curation.scoring.run import score_corpus

log = logging.getLogger(__name__)


def score_cached(documents: pd.DataFrame, embeddings: np.ndarray, scoring: Mapping[str, Any],
                 cache: Mapping[str, Any]) -> tuple[pd.DataFrame, dict[str, float], pd.DataFrame, RaterFolder]:
    """``scores`` (``id`` + one column per score + ``quality`` in [0, 15]), metrics (ROC-AUC per rater on
    the held-out human labels, counts of empty texts and NaN scores, timings, ``scoring_cache_hit``), the
    share per integer quality score (DATAMASK Table 6 analogue) and the fitted raters."""
    config = scoring_config_from_dict(scoring)
    store = result_cache(cache)
    embeddings = np.asarray(embeddings, dtype=np.float32)
    # v2: the fitted raters are cached too (v1 entries have none)
    key = config_key("scores-v2", scoring, frame_fingerprint(documents, ["id", "text"]), array_digest(embeddings))
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
    models = (RaterFolder(directory=raters_dir, fresh=bool(computed)) if store.enabled
              else RaterFolder(raters=fitted, meta=meta))
    return scores, metrics, share, models
