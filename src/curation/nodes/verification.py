"""Verification nodes: Ultra-FineWeb's efficient verification (seeds/002 Sec. 2.2, App. A, Table 8).

The experiment lives in :mod:`curation.verification`; these adapt it to the catalog.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import tokenizers

from curation.lm.config import parse_config
from curation.verification.config import format_table8, parse_verification_config

if TYPE_CHECKING:  # torch: imported by the nodes when they run, not when `curate` lists the pipelines
    from curation.lm import PackedDataset
    from curation.lm.checkpoint import LMCheckpoint
else:  # Kedro reads every node's type hints when a run starts: they must resolve without torch
    PackedDataset = LMCheckpoint = Any

log = logging.getLogger(__name__)


def select_verification_candidates(
    documents: pd.DataFrame, scores: pd.DataFrame, embeddings: np.ndarray, pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray, selected_documents: pd.DataFrame, verification: dict[str, Any],
    budget: dict[str, Any], run: dict[str, Any], cache: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``verification_candidates`` (columns ``candidate``, ``id``: every candidate corpus and the default
    mix) and ``verification_candidates_table`` (documents and characters per corpus)."""
    from curation.verification.anneal import select_candidates

    return select_candidates(documents, scores, embeddings, pruned_scores, pruned_embeddings, selected_documents,
                             parse_verification_config(verification), budget, int(run["seed"]), cache)


def tokenize_verification_corpora(
    documents: pd.DataFrame, verification_candidates: pd.DataFrame, verification_tokenizer: tokenizers.Tokenizer,
    pretrain: dict[str, Any], verification: dict[str, Any]
) -> tuple[dict[str, PackedDataset], dict[str, float]]:
    """Pack the default mix and each candidate (``{name: PackedDataset}``), documents in corpus order; each
    candidate cut to a seeded ``verification.candidate_tokens`` sample (its verification data, App. A)."""
    from curation.verification.anneal import pack_candidates

    cfg = parse_verification_config(verification)
    return pack_candidates(documents, verification_candidates, verification_tokenizer,
                           parse_config(pretrain).train.seq_len, cfg.candidate_tokens, cfg.seed)


def train_verification_base(
    verification_tokens: dict[str, PackedDataset], verification_tokenizer: tokenizers.Tokenizer,
    pretrain: dict[str, Any], verification: dict[str, Any], cache: dict[str, Any]
) -> tuple[LMCheckpoint, pd.DataFrame, dict[str, float]]:
    """The WSD base model on the default mix (:func:`curation.verification.train_base`)."""
    from curation.verification.anneal import train_base

    return train_base(verification_tokens, verification_tokenizer, parse_config(pretrain),
                      parse_verification_config(verification), cache)


def anneal_candidates(
    verification_base: LMCheckpoint, verification_tokens: dict[str, PackedDataset], pretrain: dict[str, Any],
    verification: dict[str, Any], eval: dict[str, Any], cache: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """``verification_results`` (run, dataset, ratio, task, metric, value), ``verification_anneal_history``
    (step + one loss column per run) and metrics (:func:`curation.verification.anneal_candidates`)."""
    from curation.verification.anneal import anneal_candidates as anneal

    return anneal(verification_base, verification_tokens, parse_config(pretrain),
                  parse_verification_config(verification), eval, cache)


def tabulate_verification(verification_results: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float], Any]:
    """``verification_table`` (Table 8 analogue, percent; ``delta_*`` in points vs the default-mix-only
    annealing at the same ratio), ``verification_metrics`` (``<candidate>_<ratio>_delta_average`` ...)
    and ``verification_plot`` (per-task deltas)."""
    from curation.reporting.plots import plot_verification_deltas
    from curation.verification.anneal import tabulate

    table, metrics, candidates, tasks = tabulate(verification_results)
    log.info("efficient verification (Table 8 analogue):\n%s", format_table8(table))
    return table, metrics, plot_verification_deltas(candidates, tasks)
