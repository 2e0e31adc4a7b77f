"""Selection nodes: run a selection method on the pruned corpus, then describe the result."""

from __future__ import annotations

import logging
import time
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
from curation.selection import diagnose, select

log = logging.getLogger(__name__)


def resolve_budget(budget: dict[str, Any], n_corpus: int, n_candidates: int) -> int:
    """Documents to select: ``budget.docs``, else ``keep_ratio`` x the ingested corpus size.

    The ratio refers to the corpus before pruning, as in DATAMASK (FineWeb-Mask
    keeps ~10% of FineWeb after dropping its low-quality 40-50%).
    """
    if budget.get("docs") is not None:
        wanted = int(budget["docs"])
    else:
        ratio = float(budget["keep_ratio"])
        if not 0 < ratio < 1:
            raise ValueError(f"budget.keep_ratio must be in (0, 1), got {ratio}")
        wanted = int(round(ratio * n_corpus))
    if not 0 < wanted < n_candidates:
        raise ValueError(f"budget of {wanted} documents must be in (0, {n_candidates}) — the pruned corpus "
                         "has that many; lower budget.keep_ratio/budget.docs or prune less")
    return wanted


def select_documents(
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    documents: pd.DataFrame,
    selection: dict[str, Any],
    budget: dict[str, Any],
    run: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Run ``selection.method``; return ``selected_ids``, ``selected_documents``,
    ``selection_history`` (one row per recorded step) and ``selection_run_metrics``."""
    method = selection["method"]
    quality = pruned_scores["quality"].to_numpy(dtype="float64")
    embeddings = np.array(pruned_embeddings, dtype="float32")  # a writable copy of the memory map
    n_select = resolve_budget(budget, len(documents), len(quality))
    config = {k: v for k, v in selection.items() if k != "method"}
    bar = tqdm(desc=f"selection ({method})", unit="step")

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    started = time.perf_counter()
    result = select(method, quality=quality, embeddings=embeddings, budget=n_select, config=config,
                    seed=int(run["seed"]), progress=progress)
    seconds = time.perf_counter() - started
    bar.close()
    ids = pruned_scores["id"].iloc[result.indices].reset_index(drop=True)
    selected_ids = pd.DataFrame({"id": ids, "quality": quality[result.indices]})
    chosen = set(ids)
    selected_documents = documents[documents["id"].isin(chosen)].reset_index(drop=True)
    history = result.history.copy()
    if not history.empty and "step" in history and "block" in history and history["block"].nunique() > 1:
        # MLflow wants one increasing step per series: number steps across blocks.
        history["step"] = np.arange(len(history))
    metrics = {"budget_docs": float(n_select), "candidates": float(len(quality)), "corpus_docs": float(len(documents)),
               "selection_seconds": seconds}
    metrics.update({f"info_{k}": float(v) for k, v in result.info.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    log.info("selected %d of %d candidates with %s in %.1fs", n_select, len(quality), method, seconds)
    return selected_ids, selected_documents, history, metrics


def describe_selection(
    selected_ids: pd.DataFrame,
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    document_stats: pd.DataFrame,
    selection_history: pd.DataFrame,
    selection: dict[str, Any],
    run: dict[str, Any],
) -> tuple[dict[str, float], pd.DataFrame, Any, Any, Any]:
    """Diagnostics of the selection against the candidates (every objective, DiSF
    dominance, length bias, source mix) and its three figures."""
    embeddings = np.asarray(pruned_embeddings, dtype="float32")
    quality = pruned_scores["quality"].to_numpy(dtype="float64")
    position = pd.Series(np.arange(len(pruned_scores)), index=pruned_scores["id"].to_numpy())
    indices = np.sort(position.loc[selected_ids["id"].to_numpy()].to_numpy())
    stats = document_stats.set_index("id").reindex(pruned_scores["id"].to_numpy())
    metrics = diagnose(embeddings, quality, indices, lengths=stats["n_words"].to_numpy(dtype="float64"),
                       sources=stats["source"].astype("string").fillna("unknown").to_numpy(), seed=int(run["seed"]))
    metrics = {f"selected_{k}".replace("/", "_"): float(v) for k, v in metrics.items()}
    clusters = cluster_quality_diversity(embeddings, quality, indices, seed=int(run["seed"]))
    title = f"{selection['method']}" + (f", {selection['diversity']}, lam={selection['lam']}"
                                        if "diversity" in selection and "lam" in selection else "")
    return (metrics, clusters, plot_objective_trajectory(selection_history, title=title),
            plot_selection_map(embeddings, quality, indices, seed=int(run["seed"]), title=title),
            plot_quality_diversity_heatmap(clusters))
