"""Decide nodes (issue #38): every candidate selection at one token budget -> K seeds of a small LM per
(candidate, model size) -> the decisions table, heat map and recommendation.

The cells run in one process, one after the other, each cached by content (the corpus pick, the
tokenizer, the trained model, its evaluation: :mod:`curation.lm.cached`, :mod:`curation.evaluation.runs`),
so a killed ``curate experiment=decide`` re-run recomputes only the unfinished cells (a half-trained
model resumes from its Lightning checkpoint). Each finished cell is an MLflow child run of the job's run.
The report is :mod:`curation.reporting.decide`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import numpy as np
import pandas as pd

from curation.evaluation.runs import run_evaluation
from curation.lm import parse_config
from curation.lm.cached import cached_tokenizer, pretrain as pretrain_lm, split_validation, tokenize_texts
from curation.lm.config import PretrainConfig, get_config
from curation.reporting.decide import (
    DECISION_METRICS,
    decision_table,
    headline_metric,
    item_vs_seed,
    parse_decide,
    recommendation,
    size_agreement,
)
from curation.selection.corpus import corpus_documents

log = logging.getLogger(__name__)

CELL_KEYS = ("candidate", "size", "seed")
# per-cell metrics kept beside the decision metrics
CELL_METRICS = ("corpus_docs", "corpus_tokens", "budget_tokens", "corpus_token_error", "corpus_score_mean",
                "lm_tokens", "train_tokens", "epochs", "parameters", "final_loss", "train_seconds",
                "train_tokens_per_s", "eval_seconds", "pretrain_cache_hit", "eval_cache_hit")


class TooSmallForBudget(ValueError):
    """A candidate holds fewer LM tokens than a cell trains on: it would be repeated (> 1 epoch)."""


def size_config(base: PretrainConfig, size: str) -> PretrainConfig:
    """The model of ``size`` trained as ``base`` is (same tokenizer, tokens, schedule): ``tiny`` is
    ``base`` itself (the ``pretrain`` group as composed); any other name a preset's model
    (:data:`curation.lm.config.PRESETS`) with ``base``'s tokenizer and ``train`` block: the same tokens."""
    if size == "tiny":
        return base
    preset = get_config(size)
    model = dataclasses.replace(preset.model, vocab_size=base.model.vocab_size,
                                max_seq_len=max(preset.model.max_seq_len, base.train.seq_len))
    return dataclasses.replace(base, name=size, model=model).validate()


def _progress(done: int, total: int, started: float, what: str) -> None:
    elapsed = time.perf_counter() - started
    eta = elapsed / max(done, 1) * (total - done)
    log.info("decide: cell %d/%d done (%s); %.0f s so far, ~%.0f s left", done, total, what, elapsed, eta)
    print(f"[decide] cell {done}/{total}: {what} ({elapsed:.0f} s, ~{eta:.0f} s left)", flush=True)


def run_decide_cells(
    documents: pd.DataFrame, scores: pd.DataFrame, embeddings: np.ndarray, pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray, decide: dict[str, Any], budget: dict[str, Any], pretrain: dict[str, Any],
    eval: dict[str, Any], run: dict[str, Any], cache: dict[str, Any],
) -> tuple[pd.DataFrame, dict, dict[str, float]]:
    """Train and evaluate every (candidate, size, seed) cell: the cell table (one row per cell: the
    decision metrics and what the cell was made from), the per-item evaluation values of each cell, and
    the run's metrics. Refuses a candidate whose corpus is smaller than a cell's training tokens."""
    from curation.tracking.child_runs import CellRuns

    cfg = parse_decide(decide)
    base = parse_config(pretrain)
    tokenizer, _ = cached_tokenizer(documents, base.tokenizer, cache)
    seed = int(run["seed"])
    total = len(cfg.candidates) * len(cfg.sizes) * len(cfg.seeds)
    children = CellRuns("decide")
    rows, items, started, done = [], {}, time.perf_counter(), 0
    corpora = {}
    for name, spec in cfg.candidates.items():  # every pick first: a bad budget fails before any training
        chosen, corpus_metrics = corpus_documents(documents, scores, embeddings, pruned_scores, pruned_embeddings,
                                                  spec, budget, seed, cache)
        packed, pack_metrics = tokenize_texts(chosen["text"].tolist(), tokenizer, base.train.seq_len)
        corpora[name] = (packed, {**corpus_metrics, "lm_tokens": pack_metrics["tokens_total"]})
        log.info("decide: %s holds %d documents, %.0f reference tokens, %.0f LM tokens", name,
                 corpus_metrics["corpus_docs"], corpus_metrics["corpus_tokens"], pack_metrics["tokens_total"])
    for size in cfg.sizes:
        size_cfg = size_config(base, size)
        train_tokens = size_cfg.train.total_steps() * size_cfg.train.tokens_per_step
        for name, (packed, corpus_metrics) in corpora.items():
            train_part, _ = split_validation(packed, size_cfg.train.batch_size, size_cfg.train.val_batches)
            available = len(train_part) * size_cfg.train.seq_len
            if train_tokens > available:
                raise TooSmallForBudget(
                    f"decide: candidate {name!r} holds {available:,} LM training tokens, a cell trains on "
                    f"{train_tokens:,}: it would repeat documents (> 1 epoch). Raise budget.tokens / "
                    f"budget.token_ratio or lower pretrain.train.max_tokens")
            for train_seed in cfg.seeds:
                cell_cfg = dataclasses.replace(size_cfg, train=dataclasses.replace(size_cfg.train, seed=int(train_seed)))
                checkpoint, _, train_metrics = pretrain_lm(packed, tokenizer, cell_cfg, cache)
                cell_items: dict = {}
                eval_metrics, _ = run_evaluation(checkpoint, eval, cache, items_out=cell_items)
                row = {"candidate": name, "size": size, "seed": int(train_seed), **corpus_metrics, **train_metrics,
                       **eval_metrics}
                rows.append(row)
                items[(size, name, int(train_seed))] = cell_items
                kept = {k: float(row[k]) for k in (*DECISION_METRICS, *CELL_METRICS) if k in row}
                children(f"{name} / {size} / seed {train_seed}",
                         {"candidate": name, "size": size, "seed": train_seed, "method": spec_of(cfg, name)},
                         kept)
                done += 1
                _progress(done, total, started,
                          f"{name}, {size}, seed {train_seed}: "
                          + ", ".join(f"{m} {row[m]:.4g}" for m in ("mc_correct_prob_per_char", "ref_bits_per_byte")
                                      if m in row))
    cells = pd.DataFrame(rows)
    keep = [c for c in (*CELL_KEYS, *DECISION_METRICS, *CELL_METRICS) if c in cells.columns]
    metrics = {"decide_cells": float(len(cells)), "decide_seconds": time.perf_counter() - started,
               "decide_candidates": float(len(cfg.candidates)), "decide_sizes": float(len(cfg.sizes)),
               "decide_max_epochs": float(cells["epochs"].max()),
               "decide_budget_tokens": float(cells["budget_tokens"].iloc[0]) if "budget_tokens" in cells else np.nan}
    return cells[keep], items, metrics


def spec_of(cfg: Any, name: str) -> str:
    spec = cfg.candidates[name]
    return f"{spec.method} on {spec.pool} by {spec.score}"


def report_decisions(decide_cells: pd.DataFrame, decide_items: dict, decide: dict[str, Any], eval: dict[str, Any],
                     data: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, Any, str, dict[str, float]]:
    """The decisions table (``decisions.csv``: mean_diff, se, p, decided per size, pair and metric), the
    two-size agreement, the item-vs-seed error table, the heat map, the recommendation (Markdown) and
    the headline numbers as metrics."""
    from curation.reporting.decisions import heatmap

    cfg = parse_decide(decide)
    order = list(cfg.candidates)
    table = decision_table(decide_cells, order=order)
    sizes = list(dict.fromkeys(decide_cells["size"]))
    agreement = size_agreement(table, sizes[0], sizes[-1]) if len(sizes) > 1 else pd.DataFrame()
    headline, why = headline_metric(agreement if len(sizes) > 1 else None, cfg.headline)
    limit = eval.get("limit") or 0
    errors = item_vs_seed(decide_cells, decide_items, int(limit))
    size = sizes[-1] if len(sizes) > 1 else sizes[0]
    params = decide_cells.groupby("size")["parameters"].first().to_dict() if "parameters" in decide_cells else {}
    corpus = str(data.get("path") or "")
    text = recommendation(decide_cells, table, headline, why, size=size,
                          budget_tokens=float(decide_cells["budget_tokens"].iloc[0]),
                          train_tokens=float(decide_cells["train_tokens"].iloc[0]), parameters=params,
                          agreement=agreement, corpus=corpus)
    if not errors.empty:
        text += "\nItem sampling error next to the seed spread (a difference between two candidates):\n\n"
        text += "| size | metric | seed sd of a difference | item SE of a difference | enough items | items needed |\n"
        text += "|---|---|---:|---:|---|---:|\n"
        for _, r in errors.iterrows():
            text += (f"| {r['size']} | {r['metric']} | {r['seed_sd_diff']:.3g} | {r['item_se_diff']:.3g} | "
                     f"{'yes' if r['enough'] else 'no'} | {r['items_needed']} |\n")
    shown = table[table["size"] == size].rename(columns={"p": "p_value"})
    if cfg.paper == "table2":
        from curation.reporting.table2 import paper_verdict

        lines = paper_verdict(shown, [m for m in DECISION_METRICS if m in set(shown["metric"])], order)
        text += "\nAgainst DATAMASK Table 2 (the 1.5B averages of each corpus's analogue):\n\n" + "".join(
            f"- {line}\n" for line in lines)
    fig = heatmap(shown, cfg.reference, [m for m in DECISION_METRICS if m in set(shown["metric"])],
                  f"decide ({size}): candidate - {cfg.reference}")
    best = text.split("**Recommendation: `", 1)[1].split("`", 1)[0]
    metrics = {"decide_decided_pairs": float(table["decided"].sum()), "decide_pairs": float(len(table))}
    for _, r in agreement.iterrows() if not agreement.empty else []:
        metrics[f"decide_share_holds_{r['metric']}"] = float(r["share_holds"])
    log.info("decide: recommendation %s on %s", best, headline)
    return table, agreement, errors, fig, text, metrics
