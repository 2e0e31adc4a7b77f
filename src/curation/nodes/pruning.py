"""Pruning node: drop the low-quality tail before selection (DATAMASK Sec. 4.3), shard by shard
(:func:`curation.pruning.prune_shards`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from curation.cache import config_key
from curation.configuration import parse_dataclass
from curation.pruning import PRUNING_VERSION, PruningConfig, prune_shards
from curation.reporting.plots import plot_quality_histogram
from curation.shards import ShardedDataset
from curation.shards.work import engine_of, stage_folder


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
