"""The selection pipeline's pick in memory: ``selection.method`` on the pruned corpus.

DATAMASK Sec. 4.3 prunes by quality, then selects jointly: :func:`run_selection` runs the configured
method (:func:`curation.selection.select`; with a token budget
:func:`curation.selection.tokens.select_tokens`) on the candidate pool of the pruned corpus for the
resolved budget (:mod:`curation.selection.corpus_budget`), and returns the chosen ids (with the
score they were picked by), their documents, the method's history and the run's metrics. The sharded
pick is :mod:`curation.selection.corpus_pick_shards`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

from curation.selection.corpus_budget import candidate_pool, resolve_budget, resolve_token_budget

log = logging.getLogger(__name__)


@dataclass
class SelectionRun:
    """The result of :func:`run_selection`: chosen ids (with quality), the documents, history, metrics."""

    selected_ids: pd.DataFrame
    selected_documents: pd.DataFrame
    history: pd.DataFrame
    metrics: dict[str, float]


def run_selection(pruned_scores: pd.DataFrame, pruned_embeddings: np.ndarray, documents: pd.DataFrame,
                  selection: Mapping[str, Any], budget: Mapping[str, Any], seed: int,
                  progress: Optional[Callable[[int, int], None]] = None) -> SelectionRun:
    """Run ``selection.method`` (:func:`curation.selection.select`) on the candidate pool of the pruned
    corpus for the resolved budget; documents keep ``documents`` order."""
    from curation.data.tokens import count_tokens

    method = selection["method"]
    pool = candidate_pool(len(pruned_scores), budget, seed)
    score = check_score_column(selection, list(pruned_scores.columns))
    from curation.pruning import numeric_scores

    quality = numeric_scores(score, pruned_scores[score], key="selection.score")[pool]
    embeddings = np.array(pruned_embeddings[pool], dtype="float32")  # a writable copy of the memory map
    config = {k: v for k, v in selection.items() if k != "method"}
    tokens = resolve_token_budget(documents, budget, {"enabled": False})
    started = time.perf_counter()
    if tokens is None:
        n_select = resolve_budget(budget, len(documents), len(pruned_scores), len(pool))
        from curation.selection.api import select  # torch: imported when a pick runs
        result = select(method, quality=quality, embeddings=embeddings, budget=n_select, config=config,
                        seed=seed, progress=progress)
    else:
        from curation.selection.tokens import select_tokens

        pool_ids = pruned_scores["id"].astype(str).iloc[pool]
        result = select_tokens(method, quality=quality, embeddings=embeddings,
                               n_tokens=tokens.n_tokens.reindex(pool_ids).to_numpy(), budget_tokens=tokens.budget,
                               config=config, seed=seed, progress=progress,
                               groups=None if tokens.groups is None else tokens.groups.reindex(pool_ids).to_numpy(),
                               proportions=tokens.proportions)
        n_select = len(result.indices)
    seconds = time.perf_counter() - started
    ids = pruned_scores["id"].iloc[pool[result.indices]].reset_index(drop=True)
    selected_ids = _selected_frame(ids, quality[result.indices], score,
                                   pruned_scores["quality"].to_numpy(dtype="float64")[pool[result.indices]]
                                   if score != "quality" and "quality" in pruned_scores else None)
    selected_documents = documents[documents["id"].isin(set(ids))].reset_index(drop=True)
    selected_documents["n_tokens"] = count_tokens(selected_documents["text"].tolist())
    history = result.history.copy()
    if not history.empty and "step" in history and "block" in history and history["block"].nunique() > 1:
        # MLflow wants one increasing step per series: number steps across blocks.
        history["step"] = np.arange(len(history))
    metrics = {"budget_docs": float(n_select), "candidates": float(len(quality)), "corpus_docs": float(len(documents)),
               "pruned_candidates": float(len(pruned_scores)), "selection_seconds": seconds,
               "selected_tokens": float(selected_documents["n_tokens"].sum())}
    if tokens is not None:
        metrics["budget_tokens"] = float(tokens.budget)
        metrics["selected_token_error"] = metrics["selected_tokens"] / tokens.budget - 1.0
    metrics.update({f"info_{k}": float(v) for k, v in result.info.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    log.info("selected %d of %d candidates with %s in %.1fs", n_select, len(quality), method, seconds)
    return SelectionRun(selected_ids, selected_documents, history, metrics)


def check_score_column(selection: Mapping[str, Any], columns: list[str]) -> str:
    """``selection.score`` (default ``quality``), refused with the columns there are when the scores lack it."""
    from curation.configuration import ConfigError

    score = str(selection.get("score") or "quality")
    if score not in columns:
        raters = [c for c in columns if c != "id"]
        raise ConfigError("selection.score", f"{score!r} is not a column of the pruned scores (they have "
                          f"{raters}); set selection.score to one of them (quality = the merged 0-15 score), or "
                          "turn that rater on in the scoring config and re-run scoring", score)
    return score


def _selected_frame(ids: Any, values: np.ndarray, score: str, merged: Optional[np.ndarray]) -> pd.DataFrame:
    """``selected_ids``: id and the merged ``quality``; with another ``selection.score``, that column too."""
    if score == "quality":
        return pd.DataFrame({"id": ids, "quality": values})
    frame = pd.DataFrame({"id": ids, score: values})
    if merged is not None:
        frame.insert(1, "quality", merged)
    return frame
