"""ufw_classifier nodes: Ultra-FineWeb's verified-seed fastText classifier (seeds/002 Sec. 2.3-2.5, 3.2).

The loop lives in :mod:`curation.verification.seed_loop`; these adapt it to the catalog and hand MLflow
each pool's verification result (``ufw_pool_metrics``, ``ufw_pool_verification_table``) and the
classifier's keep rate per category (``ufw_classifier_metrics``, ``ufw_keep_rates_table``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np
import pandas as pd
import tokenizers

from curation.lm import parse_config
from curation.scoring.config import scoring_config_from_dict
from curation.scoring.training_sets import eval_roc_auc
from curation.verification import parse_verification_config
from curation.verification.seed_loop import decide_pools, keep_rates, run_rounds, seed_pools, verify_pools

log = logging.getLogger(__name__)


def _key(domain: Any) -> str:
    """A domain (category or a user's source value) in the characters an MLflow metric name allows."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(domain))


def select_seed_pools(documents: pd.DataFrame, verification: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``ufw_seed_pools`` (pool, id, text, in_corpus) and ``ufw_seed_pools_table`` (documents, characters)."""
    pools = seed_pools(documents, parse_verification_config(verification).seed_loop)
    table = pools.groupby("pool", sort=False).agg(docs=("id", "size"), chars=("text", lambda t: int(t.str.len().sum())),
                                                  in_corpus=("in_corpus", "sum")).reset_index()
    return pools, table


def verify_seed_pools(
    documents: pd.DataFrame, ufw_seed_pools: pd.DataFrame, ufw_tokenizer: tokenizers.Tokenizer,
    pretrain: dict[str, Any], verification: dict[str, Any], eval: dict[str, Any], cache: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Each pool's efficient verification over the seeds and the decision (Sec. 2.2-2.3): returns
    ``ufw_pool_gains`` (pool, seed, average, control, gain), ``ufw_pool_results`` (every evaluation),
    ``ufw_pool_verification_table`` (pool, mean_gain, se, n_seeds, t, helps, positive, fallback) and
    ``ufw_pool_metrics`` (``pool_<name>_mean_gain`` / ``_se`` / ``_helps`` / ``_positive``, in points)."""
    vcfg = parse_verification_config(verification)
    loop = vcfg.seed_loop
    gains, results, metrics = verify_pools(ufw_seed_pools, documents, ufw_tokenizer, parse_config(pretrain), vcfg,
                                           loop, eval, cache)
    decisions = decide_pools(gains, loop.z, loop.if_none)
    for _, row in decisions.iterrows():
        for key in ("mean_gain", "se", "t", "helps", "positive"):
            metrics[f"pool_{row['pool']}_{key}"] = float(row[key])
    metrics["pools_helping"] = float(decisions["helps"].sum())
    metrics["positives_fallback"] = float(decisions["fallback"].any())
    log.info("seed pools, gain over the default-only annealing (points, mean +- SE over %d seeds):\n%s",
             len(loop.seeds), decisions.to_string(index=False))
    return gains, results, decisions, metrics


def train_ufw_classifier(
    documents: pd.DataFrame, ufw_seed_pools: pd.DataFrame, ufw_pool_verification_table: pd.DataFrame,
    verification: dict[str, Any], scoring: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """The classifier round(s) with the ``fasttext_ultrafineweb`` recipe of the scoring group, the corpus
    scored: ``ufw_training_set`` (id, label, origin, round), ``ufw_scores`` (id, category / source, ufw_score,
    keep, per-round scores), ``ufw_keep_rates_table`` and ``ufw_classifier_metrics`` (``keep_rate_<category>``,
    per round counts and keep rates, ``roc_auc`` on the held-out human labels)."""
    loop = parse_verification_config(verification).seed_loop
    fasttext_cfg = scoring_config_from_dict(scoring).fasttext_ultrafineweb
    training, scores, metrics = run_rounds(documents, ufw_seed_pools, ufw_pool_verification_table, loop, fasttext_cfg)
    rates = keep_rates(scores)
    for _, row in rates.iterrows():
        metrics[f"keep_rate_{_key(row['category'])}"] = row["keep_rate"]
    for k in range(1, int(metrics["rounds_run"]) + 1):
        round_rates = keep_rates(scores.assign(keep=scores[f"ufw_score_round{k}"] >= metrics["threshold"],
                                               ufw_score=scores[f"ufw_score_round{k}"]))
        for _, row in round_rates.iterrows():
            metrics[f"round{k}_keep_rate_{_key(row['category'])}"] = row["keep_rate"]
    if "quality_label" in documents:  # a corpus without human labels has no ROC-AUC
        auc = eval_roc_auc(documents, scores["ufw_score"].to_numpy())
        metrics["roc_auc"], metrics["roc_auc_n_eval"] = auc["roc_auc"], float(auc["n_eval"])
    log.info("ufw_classifier keep rates (P >= %.2f):\n%s", metrics["threshold"], rates.to_string(index=False))
    return training, scores, rates, metrics


def filter_ufw_keep(documents: pd.DataFrame, ufw_scores: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """The P >= 0.5 filter as a stage (Sec. 2.5): the documents the classifier keeps, in corpus order."""
    keep = documents["id"].map(ufw_scores.set_index("id")["keep"]).fillna(False).to_numpy(dtype=bool)
    kept = documents[keep].reset_index(drop=True)
    return kept, {"kept": float(keep.sum()), "dropped": float((~keep).sum()), "keep_rate": float(np.mean(keep))}
