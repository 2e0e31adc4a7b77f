"""Fit every configured rater on a corpus, score it, merge into ``quality``.

``score_corpus`` is what a Kedro node wraps: a corpus frame (columns ``id``,
``text``, ``source``, ``extra``, ``quality_label``) and an optional embedding
matrix in, one scores row per document, the fitted raters and a flat metrics
dict (bad-input counts, training-set sizes, eval ROC-AUC per score column)
out. Embeddings are computed once and shared by the Edu and Wiki raters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from curation.scoring.config import ScoringConfig
from curation.scoring.dsir import DSIRImportance
from curation.scoring.embedding_raters import EduRater, WikiRater, build_edu_annotations, wiki_training_config
from curation.scoring.fasttext_rater import FastTextRater
from curation.scoring.merge import merge_quality
from curation.scoring.redpajama import RedPajamaSignals
from curation.scoring.training_sets import build_training_set, category_of, eval_roc_auc


@dataclass
class ScoringResult:
    scores: pd.DataFrame  # id + one column per score + <component>_0_5 + quality
    metrics: dict[str, float] = field(default_factory=dict)
    raters: dict[str, Any] = field(default_factory=dict)


def _log_counts(metrics: dict, prefix: str, counts: dict) -> None:
    metrics.update({f"{prefix}/{k}": v for k, v in counts.items()})


def score_corpus(
    df: pd.DataFrame,
    cfg: ScoringConfig | None = None,
    embeddings: np.ndarray | None = None,
    embedder=None,
) -> ScoringResult:
    """Train and apply the raters in ``cfg.raters``; add ``quality`` if its components ran.

    ``embeddings`` (n_docs, d), row-aligned with ``df``, saves re-embedding;
    otherwise ``embedder`` (or the default SentenceEmbedder) computes them.
    """
    cfg = cfg or ScoringConfig()
    df = df.reset_index(drop=True)
    texts = df["text"].tolist()
    if "category" not in df.columns:
        df = df.assign(category=category_of(df["extra"]))
    scores = pd.DataFrame({"id": df["id"].to_numpy()})
    metrics: dict[str, float] = {}
    raters: dict[str, Any] = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        out = fn()
        metrics[f"{name}/seconds"] = time.perf_counter() - t0
        return out

    row_of = {doc_id: i for i, doc_id in enumerate(df["id"])}
    for name in ("fasttext_dclm", "fasttext_ultrafineweb"):
        if name not in cfg.raters:
            continue
        ft_cfg = getattr(cfg, name)
        rater = FastTextRater(ft_cfg)
        # preprocess (tokenise) the corpus once; training rows are picked from it
        prepared = timed(f"{name}/preprocess", lambda: rater.preprocess(texts))
        if not ft_cfg.pretrained_path:
            ts = build_training_set(df, cfg.training)
            _log_counts(metrics, f"{name}/train", ts.counts)
            pos = [prepared[row_of[i]] for i in ts.positive_ids]
            neg = [prepared[row_of[i]] for i in ts.negative_ids]
            timed(f"{name}/fit", lambda: rater.fit_prepared(pos, neg))
        s, counts = timed(f"{name}/score", lambda: rater.score_prepared_counted(prepared))
        scores[name] = s
        _log_counts(metrics, name, counts)
        raters[name] = rater

    needs_embeddings = "edu" in cfg.raters or ("wiki" in cfg.raters and cfg.wiki.features == "embedding")
    if needs_embeddings:
        if embeddings is None:
            from curation.embedding import SentenceEmbedder

            embedder = embedder or SentenceEmbedder()
            embeddings = timed("embed", lambda: np.asarray(embedder(texts), dtype=np.float32))
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.shape[0] != len(df):
            raise ValueError(f"{embeddings.shape[0]} embeddings for {len(df)} documents")

    if "edu" in cfg.raters:
        table, ann_counts = build_edu_annotations(df, cfg.edu, cfg.training)
        _log_counts(metrics, "edu/annotations", ann_counts)
        edu = EduRater(cfg.edu, embedder)
        # corpus rows reuse their embedding; rows from an annotation file are embedded here
        from_corpus = table["origin"] != "annotations_file"
        X = np.empty((len(table), embeddings.shape[1]), dtype=np.float32)
        X[from_corpus.to_numpy()] = embeddings[table.loc[from_corpus, "row"].to_numpy(dtype=np.int64)]
        if (~from_corpus).any():  # an annotation file: embed its texts
            X[~from_corpus.to_numpy()] = edu.embed(table.loc[~from_corpus, "text"].tolist())
        timed("edu/fit", lambda: edu.fit_embeddings(X, table["score"].to_numpy(dtype=float)))
        s = edu.score_embeddings(embeddings)
        empty = edu.empty_mask(texts)
        s[empty] = np.nan
        scores["edu"] = s
        _log_counts(metrics, "edu", {"total": len(s), "empty_text": int(empty.sum()), "nan_score": int(np.isnan(s).sum())})
        raters["edu"] = edu

    if "wiki" in cfg.raters:
        wiki = WikiRater(cfg.wiki, embedder)
        ts = build_training_set(df, wiki_training_config(cfg.training))
        _log_counts(metrics, "wiki/train", ts.counts)
        if cfg.wiki.features == "embedding":
            idx = [row_of[i] for i in ts.positive_ids + ts.negative_ids]
            y = np.r_[np.ones(len(ts.positive_ids)), np.zeros(len(ts.negative_ids))]
            timed("wiki/fit", lambda: wiki.fit_features(embeddings[idx], y))
            s = wiki.score_embeddings(embeddings)
            empty = wiki.empty_mask(texts)
            s[empty] = np.nan
            counts = {"total": len(s), "empty_text": int(empty.sum()), "nan_score": int(np.isnan(s).sum())}
        else:
            timed("wiki/fit", lambda: wiki.fit(ts.positives, ts.negatives))
            s, counts = wiki.score_counted(texts)
        scores["wiki"] = s
        _log_counts(metrics, "wiki", counts)
        raters["wiki"] = wiki

    if "dsir" in cfg.raters:
        raw_mask = df["category"].isin(cfg.dsir.raw_categories).to_numpy() if cfg.dsir.raw_categories else np.ones(len(df), bool)
        # one hashing pass over the corpus serves every target's fit and the scoring
        hasher = DSIRImportance(cfg.dsir.model)
        z = timed("dsir/features", lambda: hasher.features(texts))
        empty = hasher.empty_mask(texts)
        for target, categories in cfg.dsir.targets.items():
            rater = DSIRImportance(replace(cfg.dsir.model, target=target))
            tgt = df["category"].isin(categories).to_numpy()
            if not tgt.any():
                raise ValueError(f"dsir target {target!r}: no document of categories {categories}")
            rater.fit_features(z[tgt], z[raw_mask])
            s = rater.score_features(z)
            scores[rater.name] = s
            _log_counts(metrics, rater.name, {"total": len(s), "empty_text": int(empty.sum()), "nan_score": int(np.isnan(s).sum())})
            raters[rater.name] = rater

    if "redpajama" in cfg.raters:
        frame, counts = timed("redpajama/score", lambda: RedPajamaSignals().score_counted(texts))
        for col in frame.columns:
            scores[col] = frame[col].to_numpy()
        _log_counts(metrics, "redpajama", counts)

    if all(c in scores.columns for c in cfg.merge.components):
        scores, counts = merge_quality(scores, cfg.merge)
        _log_counts(metrics, "merge", counts)

    # eval ROC-AUC of every score column on the held-out human labels (higher = better quality;
    # a signal where lower is better shows as AUC < 0.5)
    for col in scores.columns.drop("id"):
        res = eval_roc_auc(df, scores[col].to_numpy(), cfg.training)
        metrics[f"roc_auc/{col}"] = res["roc_auc"]
        metrics["roc_auc/n_eval"] = res["n_eval"]
    return ScoringResult(scores=scores, metrics=metrics, raters=raters)
