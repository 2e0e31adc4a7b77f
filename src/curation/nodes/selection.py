"""Selection nodes: run a selection method on the sharded pruned corpus
(:func:`curation.selection.corpus.run_selection_shards`), then describe the result."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
from curation.reporting.plots import (
    cluster_quality_diversity,
    plot_objective_trajectory,
    plot_quality_diversity_heatmap,
    plot_selection_map,
)
from curation.selection.corpus import candidate_pool, run_selection_shards, selection_key
from curation.selection.progress import StepBar
from curation.selection.sharded import diagnosis_sample, gather_rows, read_ids, read_quality
from curation.shards import ShardedDataset
from curation.shards.work import engine_of, stage_folder
from curation.tracking.live_metrics import LiveMetrics

log = logging.getLogger(__name__)


def selection_progress(method: str) -> StepBar:
    """The selection's progress callback: a bar of the method's steps with its objective in the postfix, a log
    line every 5% of them, and the objective (DataMask's joint, quality and diversity terms, every
    ``history_every`` steps) as MLflow step metrics ``selection/<method>_<term>`` of the pipeline's run, logged
    while the selection runs (the tracking hook logs ``selection_history`` only once the node returns)."""
    metrics = LiveMetrics(f"selection/{method}_")
    return StepBar(f"selection ({method})", sink=metrics, close_sink=metrics.flush, logger=log)


def select_documents(
    pruned_scores: ShardedDataset,
    pruned_embeddings: ShardedDataset,
    documents: ShardedDataset,
    selection: dict[str, Any],
    budget: dict[str, Any],
    run: dict[str, Any],
    data: dict[str, Any],
    cache: dict[str, Any],
) -> tuple[pd.DataFrame, ShardedDataset, pd.DataFrame, dict[str, float]]:
    """Run ``selection.method`` on the pruned shards; return ``selected_ids``, ``selected_documents``
    (sharded, per documents shard in document order), ``selection_history`` and ``selection_run_metrics``.
    Refuses a pruned corpus not made from the current documents (:class:`curation.shards.lineage.LineageError`)."""
    seed = int(run["seed"])
    key = selection_key(pruned_scores, pruned_embeddings, documents, selection, budget, seed)
    folder, cached = stage_folder("selection", key, cache, run)
    with selection_progress(selection["method"]) as progress:
        result = run_selection_shards(pruned_scores, pruned_embeddings, documents, selection, budget, seed, folder,
                                      engine=engine_of(data), progress=progress)
    if not cached:
        result.selected_documents.keep = False
    return result.selected_ids, result.selected_documents, result.history, result.metrics


def describe_selection(
    selected_ids: pd.DataFrame,
    pruned_scores: ShardedDataset,
    pruned_embeddings: ShardedDataset,
    document_stats: pd.DataFrame,
    selection_history: pd.DataFrame,
    selection: dict[str, Any],
    budget: dict[str, Any],
    run: dict[str, Any],
) -> tuple[dict[str, float], pd.DataFrame, Any, Any, Any]:
    """Diagnostics of the selection against the candidates it was chosen from (every
    objective, DiSF dominance, length bias, source mix) and its three figures.

    A small-scale diagnostic: it gathers the candidate pool's embeddings. With more than
    :data:`~curation.selection.sharded.DIAGNOSE_MAX` candidates it diagnoses a seeded random sample of
    that many (and the selected items in it), and says so (``selected_diagnosed_sample`` = 1)."""
    seed = int(run["seed"])
    pool, sampled = diagnosis_sample(candidate_pool(len(pruned_scores), budget, seed), seed)
    if sampled:
        log.info("describe_selection: %d candidates, diagnosing a seeded sample of %d", len(pruned_scores), len(pool))
    ids = np.concatenate(list(read_ids(pruned_scores, pool).values()))
    quality = read_quality(pruned_scores)[pool]
    embeddings = gather_rows(pruned_embeddings, pool)
    indices = np.flatnonzero(pd.Index(ids).isin(pd.Index(selected_ids["id"].astype(str))))
    if not sampled and len(indices) != len(selected_ids):
        raise ValueError(f"describe_selection: {len(selected_ids) - len(indices)} selected ids are not among the "
                         "candidates of pruned_scores: selected_ids is stale; re-run `curate pipeline=selection`")
    stats = document_stats.set_index("id").reindex(ids)
    from curation.selection.diagnostics import diagnose  # torch: when the node runs
    metrics = diagnose(embeddings, quality, indices, lengths=stats["n_words"].to_numpy(dtype="float64"),
                       sources=stats["source"].astype("string").fillna("unknown").to_numpy(), seed=seed)
    metrics = {f"selected_{k}".replace("/", "_"): float(v) for k, v in metrics.items()}
    metrics.update(selected_diagnosed_sample=float(sampled), selected_diagnosed_candidates=float(len(pool)))
    clusters = cluster_quality_diversity(embeddings, quality, indices, seed=seed)
    title = f"{selection['method']}" + (f", {selection['diversity']}, lam={selection['lam']}"
                                        if "diversity" in selection and "lam" in selection else "")
    return (metrics, clusters, plot_objective_trajectory(selection_history, title=title),
            plot_selection_map(embeddings, quality, indices, seed=seed, title=title),
            plot_quality_diversity_heatmap(clusters))
