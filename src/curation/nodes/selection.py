"""Selection nodes: run a selection method on the pruned corpus (:mod:`curation.selection.corpus`),
then describe the result."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from curation.reporting.plots import (
    cluster_quality_diversity,
    plot_objective_trajectory,
    plot_quality_diversity_heatmap,
    plot_selection_map,
)
from curation.selection import diagnose
from curation.selection.corpus import candidate_pool, run_selection
from curation.shards.lineage import check_lineage

log = logging.getLogger(__name__)


def select_documents(
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    documents: pd.DataFrame,
    selection: dict[str, Any],
    budget: dict[str, Any],
    run: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Run ``selection.method`` (:func:`curation.selection.corpus.run_selection`); return ``selected_ids``,
    ``selected_documents``, ``selection_history`` (one row per recorded step) and ``selection_run_metrics``."""
    check_lineage("selection", "documents", documents, {"pruned_scores": pruned_scores},
                  aligned={"pruned_embeddings": (pruned_embeddings, "pruned_scores")})
    bar = tqdm(desc=f"selection ({selection['method']})", unit="step")

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    result = run_selection(pruned_scores, pruned_embeddings, documents, selection, budget, int(run["seed"]),
                           progress=progress)
    bar.close()
    return result.selected_ids, result.selected_documents, result.history, result.metrics


def describe_selection(
    selected_ids: pd.DataFrame,
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    document_stats: pd.DataFrame,
    selection_history: pd.DataFrame,
    selection: dict[str, Any],
    budget: dict[str, Any],
    run: dict[str, Any],
) -> tuple[dict[str, float], pd.DataFrame, Any, Any, Any]:
    """Diagnostics of the selection against the candidates it was chosen from (every
    objective, DiSF dominance, length bias, source mix) and its three figures."""
    pool = candidate_pool(len(pruned_scores), budget, int(run["seed"]))
    scores = pruned_scores.iloc[pool].reset_index(drop=True)
    embeddings = np.asarray(pruned_embeddings[pool], dtype="float32")
    quality = scores["quality"].to_numpy(dtype="float64")
    position = pd.Series(np.arange(len(scores)), index=scores["id"].to_numpy())
    indices = np.sort(position.loc[selected_ids["id"].to_numpy()].to_numpy())
    stats = document_stats.set_index("id").reindex(scores["id"].to_numpy())
    metrics = diagnose(embeddings, quality, indices, lengths=stats["n_words"].to_numpy(dtype="float64"),
                       sources=stats["source"].astype("string").fillna("unknown").to_numpy(), seed=int(run["seed"]))
    metrics = {f"selected_{k}".replace("/", "_"): float(v) for k, v in metrics.items()}
    clusters = cluster_quality_diversity(embeddings, quality, indices, seed=int(run["seed"]))
    title = f"{selection['method']}" + (f", {selection['diversity']}, lam={selection['lam']}"
                                        if "diversity" in selection and "lam" in selection else "")
    return (metrics, clusters, plot_objective_trajectory(selection_history, title=title),
            plot_selection_map(embeddings, quality, indices, seed=int(run["seed"]), title=title),
            plot_quality_diversity_heatmap(clusters))
