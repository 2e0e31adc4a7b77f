"""The scoring and embedding stage folders in the result cache, and scoring as a stage.

A stage folder is ``<cache.dir>/<stage>-<key>`` with ``key`` = the stage's config digest +
its input fingerprints (:func:`curation.cache.config_key`): a re-run with the same documents,
embeddings and config finds the finished folder (a cache hit; published by hard links, the
cache entry stays), and a killed run finds its finished shards and resumes after them. With
``cache.enabled: false`` the folder is a staging folder under
``data/02_intermediate/.staging/<namespace>/`` that publishing moves into place.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from curation.cache import cache_dir, config_key
from curation.scoring import merge
from curation.scoring.config import scoring_config_from_dict
from curation.scoring.persistence import RaterFolder
from curation.scoring.sharded import engine_of, quality_values, score_shards
from curation.shards import ShardedDataset

log = logging.getLogger(__name__)

STAGING = Path("data") / "02_intermediate" / ".staging"


def stage_folder(cache: Mapping[str, Any], stage: str, key: str, namespace: str = "default") -> tuple[Path, bool]:
    """``(folder, keep)``: the cache entry (keep it when publishing) or a staging folder (move it)."""
    directory = cache_dir(cache)
    if directory is not None:
        return directory / f"{stage}-{key}", True
    from curation.paths import project_root

    return project_root() / STAGING / namespace / f"{stage}-{key}", False


def scoring_digest(scoring: Mapping[str, Any]) -> str:
    """Digest of the scoring config; the engine does not change the scores, so it is left out."""
    return config_key("scores-v3", {k: v for k, v in scoring.items() if k != "engine"})


def score_cached(documents: ShardedDataset, embeddings: ShardedDataset | None, scoring: Mapping[str, Any],
                 cache: Mapping[str, Any], data: Mapping[str, Any] | None = None,
                 namespace: str = "default", embedding: Mapping[str, Any] | None = None,
                 ) -> tuple[ShardedDataset, dict[str, float], pd.DataFrame, RaterFolder]:
    """``scores`` (sharded, aligned with ``documents``: ``id`` + one column per score + ``quality`` in
    [0, 15]), metrics (ROC-AUC per score column on the held-out human labels, counts of
    empty texts and NaN scores summed over shards, timings, ``scoring_cache_hit``), the share per
    integer quality score (DATAMASK Table 6 analogue) and the fitted raters.

    ``training.source=reference``: the reference raters are built once (or found) in the shared model
    folder for the ``embedding`` config's vector space; their folders (content digests) are part of
    the cache key and of the rater manifest's ``meta.reference``."""
    config = scoring_config_from_dict(scoring)
    digest = scoring_digest(scoring)
    reference = None
    if config.training.source == "reference":
        from curation.scoring.reference import ensure_reference

        reference = ensure_reference(config, embedding)
    made_from = reference.provenance() if reference is not None else None
    key = config_key(digest, documents.fingerprint, embeddings.fingerprint if embeddings is not None else None,
                     *([made_from] if made_from else []))
    folder, keep = stage_folder(cache, "scoring", key, namespace)
    meta = {"scores_key": key, "documents": len(documents), "scoring": dict(scoring)}
    if made_from:
        meta["reference"] = made_from
    result = score_shards(documents, embeddings, config, folder, engine_of(config.engine, data),
                          config_digest=digest, keep=keep, meta=meta, reference=reference)
    metrics = {k.replace("/", "_"): float(v) for k, v in result.metrics.items()}
    metrics["scoring_cache_hit"] = float(result.cache_hit)
    metrics["scoring_shards"] = float(len(result.scores.names))
    share = pd.DataFrame()
    if "quality" in result.scores.manifest.schema:
        quality = quality_values(result.scores)
        share = merge.quality_share(quality)
        metrics["quality_mean"] = float(np.nanmean(quality)) if len(quality) else float("nan")
        metrics["quality_nan"] = float(np.isnan(quality).sum())
    models = RaterFolder(directory=result.raters_dir, fresh=not result.cache_hit)
    return result.scores, metrics, share, models
