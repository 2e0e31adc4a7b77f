"""Decide nodes (issue #38): every candidate selection at one token budget -> K seeds of a small LM per
(candidate, model size) -> the decisions table, heat map and recommendation.

The cells are :func:`curation.decide.cells.run_cells` (tasks on the ``data`` group's engine: one process, local
workers or Ray; each cell cached by content, so a killed
``curate experiment=decide`` re-run recomputes only the unfinished cells); each finished cell is an MLflow
child run of the job's run. The report is :func:`curation.reporting.decide.build_report`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from curation.lm import parse_config
from curation.decide.cells import Frames, engine_settings, progress_printer, run_cells
from curation.reporting.decide import DECISION_METRICS, build_report, parse_decide
from curation.reporting.decide_items import items_frame, items_from_frame

# per-cell metrics kept beside the decision metrics
CELL_METRICS = ("corpus_docs", "corpus_tokens", "budget_tokens", "corpus_token_error", "corpus_score_mean",
                "lm_tokens", "train_tokens", "epochs", "parameters", "final_loss", "train_seconds",
                "train_tokens_per_s", "eval_seconds", "pretrain_cache_hit", "eval_cache_hit")


def check_decide_fits(documents: pd.DataFrame, decide: dict[str, Any], budget: dict[str, Any],
                      pretrain: dict[str, Any], cache: dict[str, Any], run: dict[str, Any]) -> dict[str, float]:
    """Right after ingest, before scoring and any selection: every candidate will hold the top rung's training
    tokens (<= 1 epoch), or the job stops here in one line naming the numbers and the settings that work."""
    from curation.decide.cells import check_fits

    cfg = parse_decide(decide)
    return check_fits(documents, budget, parse_config(pretrain), cfg.rungs, cache, seed=int(run["seed"]))


def run_decide_cells(
    documents: pd.DataFrame, scores: pd.DataFrame, embeddings: np.ndarray, pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray, decide: dict[str, Any], budget: dict[str, Any], pretrain: dict[str, Any],
    eval: dict[str, Any], run: dict[str, Any], cache: dict[str, Any], fits: dict[str, float],
    data: dict[str, Any] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """The cell table (one row per candidate, size and seed: the decision metrics and what the cell was made
    from), each cell's per-item evaluation values, and the run's metrics."""
    from curation.tracking.child_runs import CellRuns

    cfg, started, children = parse_decide(decide), time.perf_counter(), CellRuns("decide")
    frames = Frames(documents, scores, embeddings, pruned_scores, pruned_embeddings)
    cells, items = run_cells(
        frames, cfg.candidates, cfg.sizes, cfg.seeds, budget, parse_config(pretrain), eval, int(run["seed"]), cache,
        on_cell=_child_runs(children),
        on_progress=progress_printer(started), rungs=cfg.rungs, draws=cfg.draws,
        **engine_settings(data))  # the cells as tasks on the data group's engine (issue #51)
    cells, items, stop = _seed_rounds(cells, items, cfg, frames, budget, pretrain, eval, run, cache, data,
                                      _child_runs(children), started)
    if cfg.fresh_top:
        cells, items = _fresh_top(cells, items, cfg, frames, budget, pretrain, eval, run, cache, data,
                                  _child_runs(children, " (fresh)"))
    keep = [c for c in ("candidate", "size", "scale", "rung_tokens", "seed", "draw_seed", "round", "corpus_digest",
                        *DECISION_METRICS, *CELL_METRICS) if c in cells.columns]
    metrics = {"decide_cells": float(len(cells)), "decide_seconds": time.perf_counter() - started,
               "decide_candidates": float(len(cfg.candidates)), "decide_sizes": float(len(cfg.sizes)),
               "decide_max_epochs": float(cells["epochs"].max()),
               "decide_budget_tokens": float(cells["budget_tokens"].iloc[0]) if "budget_tokens" in cells else np.nan,
               "decide_scales": float(cells["scale"].nunique()), "decide_rounds": float(stop.rounds),
               "decide_max_seeds_reached": float(max(stop.seeds.values())), **fits}
    # what the cells cost wherever they were made: a resumed run's decide_seconds counts only its own part, the
    # cells taken from the cache of an earlier run carry the seconds they took then (issue #53)
    for column, name in (("train_seconds", "decide_cell_train_seconds"), ("eval_seconds", "decide_cell_eval_seconds"),
                         ("pretrain_cache_hit", "decide_cells_from_cache")):
        if column in cells:
            metrics[name] = float(pd.to_numeric(cells[column], errors="coerce").fillna(0).sum())
    return cells[keep], items_frame(items), metrics


def _child_runs(children, suffix: str = ""):
    """run_cells' on_cell: an MLflow child run per cell with its decision and cell metrics."""
    return lambda name, params, row: children(f"{name}{suffix}", params, {
        k: float(row[k]) for k in (*DECISION_METRICS, *CELL_METRICS) if k in row})


def _seed_rounds(cells, items, cfg, frames, budget, pretrain, eval, run, cache, data, on_cell, started):
    """Rounds of one seed at the top scale while the leader is undecided (:mod:`curation.decide.rounds`), each
    new cell an MLflow child run like the first round's."""
    from curation.decide.cells import scale_label
    from curation.decide.rounds import add_seed_rounds, top_scale
    from curation.reporting.decide_stats import chance_levels

    _, size, tokens = top_scale(cells)
    printer: list = []

    def run_more(names: list[str], seed: int):
        printer.append(progress_printer())
        return run_cells(
            frames, {n: cfg.candidates[n] for n in names}, [size], [seed], budget, parse_config(pretrain), eval,
            int(run["seed"]), cache, on_cell=on_cell,
            on_progress=printer[-1], rungs=[tokens], draws=cfg.draws, **engine_settings(data))

    def announce(round_: int, names: list[str], why: str) -> None:
        print(f"[decide] round {round_} at {scale_label(size, tokens)}: one more seed for {', '.join(names)} ({why})",
              flush=True)

    cells, items, stop = add_seed_rounds(cells, items, cfg, run_more, chance=chance_levels(eval), started=started,
                                         on_round=announce)
    seeds = ", ".join(f"{c} {n}" for c, n in stop.seeds.items())
    print(f"[decide] stopped after {stop.rounds} round(s): {stop.reason}. Seeds: {seeds}", flush=True)
    return cells, items, stop


def _fresh_top(cells, items, cfg, frames, budget, pretrain, eval, run, cache, data, on_cell):
    """The top rung again on fresh seeds, draws and items (:mod:`curation.decide.replicate`)."""
    from curation.decide.replicate import add_fresh_top
    from curation.decide.rounds import top_scale

    _, size, tokens = top_scale(cells)
    print(f"[decide] the top rung again as an independent replicate: {len(cfg.candidates)} candidates x "
          f"{len(cfg.seeds)} fresh seeds, fresh draws, items disjoint from the ladder's", flush=True)

    def run_top(seeds: list[int], eval_block: dict):
        return run_cells(
            frames, cfg.candidates, [size], seeds, budget, parse_config(pretrain), eval_block, int(run["seed"]),
            cache, on_cell=on_cell,
            on_progress=progress_printer(), rungs=[tokens], draws=cfg.draws, **engine_settings(data))

    return add_fresh_top(cells, items, cfg.seeds, eval, run_top)


def report_decisions(decide_cells: pd.DataFrame, decide_items: pd.DataFrame, decide: dict[str, Any],
                     eval: dict[str, Any], data: dict[str, Any]) -> tuple[Any, ...]:
    """The decisions table (``decisions.csv``: mean_diff, se_seed, se_item, se, p, p_holm, decided per scale, pair
    and metric), the ladder's agreement with its top scale, the item-vs-seed error table, signal-to-noise per
    metric, the tasks at chance, the heat map, the ladder plot, the recommendation (Markdown) and the headline
    numbers as metrics."""
    from curation.reporting.decide_stats import chance_levels

    report = build_report(decide_cells, items_from_frame(decide_items), parse_decide(decide),
                          int(eval.get("limit") or 0), corpus=str(data.get("path") or ""), chance=chance_levels(eval))
    ladder = report.ladder_figure
    if ladder is None:  # one scale: an empty figure that says so (the catalog always writes ladder.png)
        import matplotlib.pyplot as plt

        ladder, ax = plt.subplots(figsize=(4, 1.2))
        ax.axis("off")
        ax.text(0.5, 0.5, "one scale: no ladder (decide.rungs / decide.sizes)", ha="center", va="center")
    return (report.table, report.agreement, report.errors, report.snr, report.tasks, report.figure, ladder,
            report.text, report.metrics)
