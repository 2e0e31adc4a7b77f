"""Pruning node: drop the low-quality tail before selection (DATAMASK Sec. 4.3)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from curation.configuration import parse_dataclass
from curation.pruning import PruningConfig, prune, quality_histogram
from curation.reporting.plots import plot_quality_histogram


def prune_documents(
    scores: pd.DataFrame, embeddings: np.ndarray, pruning: dict[str, Any]
) -> tuple[pd.DataFrame, np.ndarray, dict[str, float], pd.DataFrame, Any]:
    """Keep rows of ``scores`` (and the aligned ``embeddings`` rows) that pass the rule.

    Returns ``pruned_scores``, ``pruned_embeddings``, ``pruning_metrics``
    (``kept``, ``dropped_low_quality``, ``dropped_nan_quality`` ...), the
    before/after histogram table and its plot.
    """
    if len(scores) != len(embeddings):
        raise ValueError(f"scores have {len(scores)} rows but embeddings {len(embeddings)}: they must be aligned")
    config = parse_dataclass(PruningConfig, pruning, path="pruning")
    keep, report = prune(scores, config)
    table = quality_histogram(scores[config.score_column].to_numpy(dtype="float64", na_value=np.nan), keep)
    plot = plot_quality_histogram(table, title=f"quality before/after pruning ({config.mode})")
    return (scores.loc[keep].reset_index(drop=True), np.ascontiguousarray(embeddings[np.flatnonzero(keep)]),
            report, table, plot)
