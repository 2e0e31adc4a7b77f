"""Fit every configured rater on a corpus, score it, merge into ``quality``.

``score_corpus`` is what a Kedro node wraps: a corpus frame (columns ``id``,
``text``, ``source``, ``extra``, ``quality_label``) and an optional embedding
matrix in, one scores row per document, the fitted raters and a flat metrics
dict (bad-input counts, training-set sizes, eval ROC-AUC per score column)
out. Embeddings are computed once and shared by the Edu and Wiki raters.

``cfg.engine`` picks who applies the text raters (fastText, DSIR, RedPajama):
``inprocess`` (this process, pandas batches) or ``ray`` (a Ray Data job,
``curation.scoring.ray_engine``). Either way every rater is fitted here, and
the scores are the same. ``cfg.pretrained_dir`` loads raters saved by an
earlier run (``curation.scoring.persistence``) instead of fitting them.
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
from curation.scoring.redpajama import SIGNALS, RedPajamaSignals
from curation.scoring.training_sets import build_training_set, category_of, eval_roc_auc


@dataclass
class ScoringResult:
    scores: pd.DataFrame  # id + one column per score + <component>_0_5 + quality
    metrics: dict[str, float] = field(default_factory=dict)
    raters: dict[str, Any] = field(default_factory=dict)


def _log_counts(metrics: dict, prefix: str, counts: dict) -> None:
    metrics.update({f"{prefix}/{k}": v for k, v in counts.items()})


def _load_pretrained(cfg: ScoringConfig, embedder) -> dict[str, Any]:
    """The raters of ``cfg.raters`` saved under ``cfg.pretrained_dir`` (none if unset).

    Every configured rater but the stateless RedPajama signals must be there;
    a missing one raises ``KeyError`` naming what the folder holds.
    """
    if not cfg.pretrained_dir:
        return {}
    from curation.scoring.persistence import load_raters

    names = [n for n in ("fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki") if n in cfg.raters]
    if "dsir" in cfg.raters:
        names += [f"{target}_importance" for target in cfg.dsir.targets]
    return load_raters(cfg.pretrained_dir, names, embedder)


def _score_on_ray(df: pd.DataFrame, text_raters: dict[str, Any], signals: bool, cfg: ScoringConfig,
                  metrics: dict) -> tuple[pd.DataFrame, dict[str, float]]:
    """The text raters and signals applied by Ray Data; bad-input counts as the in-process engine logs them."""
    from curation.scoring.ray_engine import score_with_ray

    frame, timing = score_with_ray(df[["id", "text"]], text_raters, cfg.ray, signals=signals)
    for name in text_raters:
        # fastText and DSIR give NaN exactly where preprocessing / hashing leaves nothing to score
        nan = int(frame[name].isna().sum())
        counts = {"total": len(frame), "empty_text": nan, "nan_score": nan}
        if name.startswith("fasttext_"):
            counts["scored"] = len(frame) - nan
        _log_counts(metrics, name, counts)
    if signals:
        counts = {"total": len(frame), "empty_text": int((frame["doc_word_count"] == 0).sum())}
        counts |= {f"nan_{c}": int(frame[c].isna().sum()) for c in SIGNALS}
        _log_counts(metrics, "redpajama", counts)
    return frame, timing


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

    on_ray = cfg.engine == "ray"
    pretrained = _load_pretrained(cfg, embedder)
    metrics.update({f"{name}/pretrained": 1.0 for name in pretrained})
    row_of = {doc_id: i for i, doc_id in enumerate(df["id"])}
    for name in ("fasttext_dclm", "fasttext_ultrafineweb"):
        if name not in cfg.raters:
            continue
        ft_cfg = getattr(cfg, name)
        rater = pretrained.get(name) or FastTextRater(ft_cfg)
        must_fit = name not in pretrained and not ft_cfg.pretrained_path
        if on_ray:  # preprocess only the training rows here; the Ray job scores the corpus
            if must_fit:
                ts = build_training_set(df, cfg.training)
                _log_counts(metrics, f"{name}/train", ts.counts)
                timed(f"{name}/fit", lambda: rater.fit(ts.positives, ts.negatives))
            raters[name] = rater
            continue
        # preprocess (tokenise) the corpus once; training rows are picked from it
        prepared = timed(f"{name}/preprocess", lambda: rater.preprocess(texts))
        if must_fit:
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
        if "edu" in pretrained:
            edu = pretrained["edu"]
        else:
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
        wiki = pretrained.get("wiki") or WikiRater(cfg.wiki, embedder)
        if "wiki" not in pretrained:
            ts = build_training_set(df, wiki_training_config(cfg.training))
            _log_counts(metrics, "wiki/train", ts.counts)
        if wiki.cfg.features == "embedding":
            if "wiki" not in pretrained:
                idx = [row_of[i] for i in ts.positive_ids + ts.negative_ids]
                y = np.r_[np.ones(len(ts.positive_ids)), np.zeros(len(ts.negative_ids))]
                timed("wiki/fit", lambda: wiki.fit_features(embeddings[idx], y))
            s = wiki.score_embeddings(embeddings)
            empty = wiki.empty_mask(texts)
            s[empty] = np.nan
            counts = {"total": len(s), "empty_text": int(empty.sum()), "nan_score": int(np.isnan(s).sum())}
        else:
            if "wiki" not in pretrained:
                timed("wiki/fit", lambda: wiki.fit(ts.positives, ts.negatives))
            s, counts = wiki.score_counted(texts)
        scores["wiki"] = s
        _log_counts(metrics, "wiki", counts)
        raters["wiki"] = wiki

    if "dsir" in cfg.raters:
        raw_mask = df["category"].isin(cfg.dsir.raw_categories).to_numpy() if cfg.dsir.raw_categories else np.ones(len(df), bool)
        names = [f"{target}_importance" for target in cfg.dsir.targets]
        to_fit = [t for t, n in zip(cfg.dsir.targets, names) if n not in pretrained]
        masks = {t: df["category"].isin(cfg.dsir.targets[t]).to_numpy() for t in to_fit}
        # one hashing pass serves every target's fit and, in process, the scoring;
        # the Ray engine hashes here only the rows the fits read (it scores in its job)
        rows = np.ones(len(df), bool)
        if on_ray:
            rows = raw_mask.copy() if to_fit else np.zeros(len(df), bool)
            for mask in masks.values():
                rows |= mask
        hasher = DSIRImportance(cfg.dsir.model)
        z = timed("dsir/features", lambda: hasher.features([t for t, keep in zip(texts, rows) if keep])) if rows.any() else None
        for target, name in zip(cfg.dsir.targets, names):
            rater = pretrained.get(name)
            if rater is None:
                rater = DSIRImportance(replace(cfg.dsir.model, target=target))
                tgt = masks[target]
                if not tgt.any():
                    raise ValueError(f"dsir target {target!r}: no document of categories {cfg.dsir.targets[target]}")
                rater.fit_features(z[tgt[rows]], z[raw_mask[rows]])
            raters[name] = rater
            if not on_ray:
                s = rater.score_features(z)
                scores[name] = s
                nan = int(np.isnan(s).sum())  # NaN exactly where a document has no n-gram
                _log_counts(metrics, name, {"total": len(s), "empty_text": nan, "nan_score": nan})

    if "redpajama" in cfg.raters and not on_ray:
        frame, counts = timed("redpajama/score", lambda: RedPajamaSignals().score_counted(texts))
        for col in frame.columns:
            scores[col] = frame[col].to_numpy()
        _log_counts(metrics, "redpajama", counts)

    text_raters = {n: r for n, r in raters.items() if n.startswith("fasttext_") or n.endswith("_importance")}
    if on_ray and (text_raters or "redpajama" in cfg.raters):
        frame, timing = _score_on_ray(df, text_raters, "redpajama" in cfg.raters, cfg, metrics)
        metrics.update({f"ray/{k}": v for k, v in timing.items()})
        for col in frame.columns.drop("id"):
            scores[col] = frame[col].to_numpy()
        # keep the in-process column order: fastText, edu, wiki, DSIR, signals
        order = ["id", *[c for c in ("fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki") if c in scores],
                 *[n for n in text_raters if n.endswith("_importance")],
                 *[c for c in SIGNALS if c in scores]]
        scores = scores[order]

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
