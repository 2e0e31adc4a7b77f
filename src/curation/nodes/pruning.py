"""Pruning node: drop the low-quality tail before selection (DATAMASK Sec. 4.3), shard by shard
(:func:`curation.pruning.prune_shards`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from curation.cache import config_key, result_cache
from curation.configuration import parse_dataclass
from curation.paths import project_root
from curation.pruning import PRUNING_VERSION, PruningConfig, prune_shards
from curation.reporting.plots import plot_quality_histogram
from curation.shards import EngineConfig, ShardedDataset

STAGING = Path("data") / "02_intermediate" / ".staging"  # per-run work folders of streaming stages


def stage_folder(stage: str, key: str, cache: dict[str, Any], run: dict[str, Any] | None) -> tuple[Path, bool]:
    """``(folder, cached)``: the result-cache entry ``<cache.dir>/<stage>-<key>`` (kept after publishing, so an
    unchanged re-run is a hit), or with ``cache.enabled: false`` a staging folder per ``run.namespace``."""
    store = result_cache(cache)
    if store.enabled:
        return store.directory / f"{stage}-{key}", True
    namespace = str((run or {}).get("namespace") or "default")
    return project_root() / STAGING / namespace / f"{stage}-{key}", False


def engine_of(data: dict[str, Any] | None) -> EngineConfig:
    """The per-shard engine of the ``data`` group (``data.engine``, ``data.ray_address``)."""
    data = data or {}
    return EngineConfig(engine=data.get("engine") or "local", ray_address=data.get("ray_address"))


def prune_documents(
    scores: ShardedDataset, embeddings: ShardedDataset, pruning: dict[str, Any], data: dict[str, Any],
    cache: dict[str, Any], run: dict[str, Any],
) -> tuple[ShardedDataset, ShardedDataset, dict[str, float], pd.DataFrame, Any]:
    """Keep the rows of ``scores`` (and the aligned ``embeddings`` rows) that pass the rule, per shard.

    Returns ``pruned_scores`` and ``pruned_embeddings`` (sharded, the documents' shard names),
    ``pruning_metrics`` (``kept``, ``dropped_low_quality``, ``dropped_nan_quality`` ... summed over shards,
    plus ``pruning_cache_hit``), the before/after histogram table and its plot.
    """
    config = parse_dataclass(PruningConfig, pruning, path="pruning")
    key = config_key(PRUNING_VERSION, dataclasses.asdict(config), scores.fingerprint, embeddings.fingerprint)
    folder, cached = stage_folder("pruning", key, cache, run)
    hit = all((folder / f).is_file() for f in ("report.json", "pruned_scores/manifest.json",
                                                 "pruned_embeddings/manifest.json"))
    out = prune_shards(scores, embeddings, config, folder, engine=engine_of(data))
    if not cached:  # a staging folder is moved into place when published
        out.scores.keep = out.embeddings.keep = False
    plot = plot_quality_histogram(out.table, title=f"quality before/after pruning ({config.mode})")
    return out.scores, out.embeddings, {**out.report, "pruning_cache_hit": float(hit)}, out.table, plot
