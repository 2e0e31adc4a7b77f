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
from curation.shards.lineage import check_lineage

log = logging.getLogger(__name__)


def resolve_budget(budget: dict[str, Any], n_corpus: int, n_candidates: int, n_pool: int | None = None) -> int:
    """Documents to select: ``budget.docs``, else ``keep_ratio`` x the ingested corpus size.

    The ratio refers to the corpus before pruning, as in DATAMASK (FineWeb-Mask
    keeps ~10% of FineWeb after dropping its low-quality 40-50%), unless
    ``ratio_of: candidates``. ``n_pool`` is the size of the candidate subsample
    (``budget.candidates``); with ``ratio_of: corpus`` the budget shrinks by
    ``n_pool / n_candidates`` so the corpus keep ratio is unchanged.
    """
    n_pool = n_candidates if n_pool is None else n_pool
    ratio_of = budget.get("ratio_of", "corpus")
    if ratio_of not in ("corpus", "candidates"):
        raise ValueError(f"budget.ratio_of must be 'corpus' or 'candidates', got {ratio_of!r}")
    if budget.get("docs") is not None:
        wanted = int(budget["docs"])
    else:
        ratio = float(budget["keep_ratio"])
        if not 0 < ratio < 1:
            raise ValueError(f"budget.keep_ratio must be in (0, 1), got {ratio}")
        base = n_pool if ratio_of == "candidates" else n_corpus * n_pool / n_candidates
        wanted = int(round(ratio * base))
    if not 0 < wanted < n_pool:
        raise ValueError(f"budget of {wanted} documents must be in (0, {n_pool}) — the pruned corpus "
                         "(or its budget.candidates subsample) has that many; lower budget.keep_ratio/budget.docs "
                         "or prune less")
    return wanted


def candidate_pool(n_candidates: int, budget: dict[str, Any], seed: int) -> np.ndarray:
    """Positions of the candidates the selection sees: all, or a seeded random ``budget.candidates`` subset."""
    wanted = budget.get("candidates")
    if wanted is None or int(wanted) >= n_candidates:
        return np.arange(n_candidates)
    if int(wanted) < 2:
        raise ValueError(f"budget.candidates must be >= 2 (or null), got {wanted}")
    rng = np.random.default_rng([int(seed), 7919])
    return np.sort(rng.choice(n_candidates, size=int(wanted), replace=False))


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
    check_lineage("selection", "documents", documents, {"pruned_scores": pruned_scores},
                  aligned={"pruned_embeddings": (pruned_embeddings, "pruned_scores")})
    method = selection["method"]
    pool = candidate_pool(len(pruned_scores), budget, int(run["seed"]))
    quality = pruned_scores["quality"].to_numpy(dtype="float64")[pool]
    embeddings = np.array(pruned_embeddings[pool], dtype="float32")  # a writable copy of the memory map
    n_select = resolve_budget(budget, len(documents), len(pruned_scores), len(pool))
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
    ids = pruned_scores["id"].iloc[pool[result.indices]].reset_index(drop=True)
    selected_ids = pd.DataFrame({"id": ids, "quality": quality[result.indices]})
    chosen = set(ids)
    selected_documents = documents[documents["id"].isin(chosen)].reset_index(drop=True)
    history = result.history.copy()
    if not history.empty and "step" in history and "block" in history and history["block"].nunique() > 1:
        # MLflow wants one increasing step per series: number steps across blocks.
        history["step"] = np.arange(len(history))
    metrics = {"budget_docs": float(n_select), "candidates": float(len(quality)), "corpus_docs": float(len(documents)),
               "pruned_candidates": float(len(pruned_scores)),
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
