"""Decide nodes (issue #38): every candidate selection at one token budget -> K seeds of a small LM per
(candidate, model size) -> the decisions table, heat map and recommendation.

The cells are :func:`curation.lm.cells.run_cells` (one process, each cell cached by content, so a killed
``curate experiment=decide`` re-run recomputes only the unfinished cells); each finished cell is an MLflow
child run of the job's run. The report is :func:`curation.reporting.decide.build_report`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from curation.lm import parse_config
from curation.lm.cells import Frames, progress_printer, run_cells
from curation.reporting.decide import DECISION_METRICS, build_report, parse_decide

# per-cell metrics kept beside the decision metrics
CELL_METRICS = ("corpus_docs", "corpus_tokens", "budget_tokens", "corpus_token_error", "corpus_score_mean",
                "lm_tokens", "train_tokens", "epochs", "parameters", "final_loss", "train_seconds",
                "train_tokens_per_s", "eval_seconds", "pretrain_cache_hit", "eval_cache_hit")


def run_decide_cells(
    documents: pd.DataFrame, scores: pd.DataFrame, embeddings: np.ndarray, pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray, decide: dict[str, Any], budget: dict[str, Any], pretrain: dict[str, Any],
    eval: dict[str, Any], run: dict[str, Any], cache: dict[str, Any],
) -> tuple[pd.DataFrame, dict, dict[str, float]]:
    """The cell table (one row per candidate, size and seed: the decision metrics and what the cell was made
    from), each cell's per-item evaluation values, and the run's metrics."""
    from curation.tracking.child_runs import CellRuns

    cfg, started, children = parse_decide(decide), time.perf_counter(), CellRuns("decide")
    frames = Frames(documents, scores, embeddings, pruned_scores, pruned_embeddings)
    cells, items = run_cells(
        frames, cfg.candidates, cfg.sizes, cfg.seeds, budget, parse_config(pretrain), eval, int(run["seed"]), cache,
        on_cell=lambda name, params, row: children(name, params, {k: float(row[k]) for k in (
            *DECISION_METRICS, *CELL_METRICS) if k in row}),
        on_progress=progress_printer(started))
    keep = [c for c in ("candidate", "size", "seed", *DECISION_METRICS, *CELL_METRICS) if c in cells.columns]
    metrics = {"decide_cells": float(len(cells)), "decide_seconds": time.perf_counter() - started,
               "decide_candidates": float(len(cfg.candidates)), "decide_sizes": float(len(cfg.sizes)),
               "decide_max_epochs": float(cells["epochs"].max()),
               "decide_budget_tokens": float(cells["budget_tokens"].iloc[0]) if "budget_tokens" in cells else np.nan}
    return cells[keep], items, metrics


def report_decisions(decide_cells: pd.DataFrame, decide_items: dict, decide: dict[str, Any], eval: dict[str, Any],
                     data: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, Any, str, dict[str, float]]:
    """The decisions table (``decisions.csv``: mean_diff, se, p, decided per size, pair and metric), the
    two-size agreement, the item-vs-seed error table, the heat map, the recommendation (Markdown) and
    the headline numbers as metrics."""
    report = build_report(decide_cells, decide_items, parse_decide(decide), int(eval.get("limit") or 0),
                          corpus=str(data.get("path") or ""))
    return report.table, report.agreement, report.errors, report.figure, report.text, report.metrics
