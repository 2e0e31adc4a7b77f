"""Fit the configured raters on a sample, apply them to any rows, merge into ``quality``.

Scoring has two steps, so that a corpus of any size is scored shard by shard
(issue 14, "Global steps stay explicit and small"):

* :func:`fit_scoring` (global, once): every rater is trained on a bounded sample
  of the corpus (``scoring.fit_sample_docs`` documents, :mod:`curation.scoring.sample`):
  the training sets come from the sample as before (``build_training_set``,
  ``build_edu_annotations``); the 0-15 merge map (DATAMASK App. A.5) is fitted on
  the sample's component scores (:class:`~curation.scoring.merge.MergeMap`); the
  eval ROC-AUC of every score column is measured on the sample's held-out
  human labels.
* :func:`apply_scoring` (per document, any batch: one shard, one frame): the
  fitted raters (fastText x2, Edu/Wiki heads on the embeddings, DSIR, RedPajama
  signals) and the fitted merge map; it returns the scores and the bad-input
  counts, which add up across shards.

:func:`score_corpus` is the one-frame entry (fit on the frame's sample, apply to
the frame); :mod:`curation.scoring.sharded` runs the same two steps on sharded
datasets, locally or as Ray tasks. With a sample holding every document (the
default size covers the bundled corpus), both give exactly the scores of
fitting and applying on the whole corpus. ``cfg.pretrained_dir`` loads raters
saved by an earlier run (``curation.scoring.persistence``) instead of fitting them.

Where the raters that need labels learn from is ``cfg.training.source``: ``reference`` (the default)
takes them trained once on the bundled reference corpus (:mod:`curation.scoring.reference`), so the
scored corpus needs only ``id`` and ``text``, and their ROC-AUC is measured on the reference's
held-out human labels; ``corpus`` trains them on the sample's own ``extra``/``category`` and
``quality_label`` columns, as before. Either way the merge map and DSIR's raw model come from the
corpus sample, which needs no label.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from curation.scoring.config import ScoringConfig
from curation.scoring.dsir import DSIRImportance
from curation.scoring.embedding_raters import EduRater, WikiRater, build_edu_annotations, wiki_training_config
from curation.scoring.fasttext_rater import FastTextRater
from curation.scoring.merge import MergeMap
from curation.scoring.redpajama import SIGNALS, RedPajamaSignals
from curation.scoring.reference import ReferenceRaters, ensure_reference
from curation.scoring.sample import sample_mask, sample_threshold
from curation.scoring.training_sets import EVAL, build_training_set, category_of, eval_roc_auc, human_label_split


@dataclass
class ScoringResult:
    scores: pd.DataFrame  # id + one column per score + <component>_0_5 + quality
    metrics: dict[str, float] = field(default_factory=dict)
    raters: dict[str, Any] = field(default_factory=dict)


@dataclass
class FittedScoring:
    """What :func:`fit_scoring` learns: the raters, the merge map and the fit's metrics."""

    raters: dict[str, Any]  # name -> fitted rater (fastText, edu, wiki, <target>_importance)
    merge: MergeMap | None  # None when a merge component is not configured
    metrics: dict[str, float] = field(default_factory=dict)  # training-set sizes, fit seconds, ROC-AUC


def _log_counts(metrics: dict, prefix: str, counts: dict) -> None:
    metrics.update({f"{prefix}/{k}": v for k, v in counts.items()})


def needs_embeddings(cfg: ScoringConfig) -> bool:
    return "edu" in cfg.raters or ("wiki" in cfg.raters and cfg.wiki.features == "embedding")


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


def _check_embeddings(cfg: ScoringConfig, embeddings: np.ndarray | None, n: int) -> np.ndarray | None:
    if not needs_embeddings(cfg):
        return None
    if embeddings is None:
        raise ValueError("the edu / wiki raters need the documents' embeddings")
    embeddings = np.asarray(embeddings, dtype=np.float32)
    if embeddings.shape[0] != n:
        raise ValueError(f"{embeddings.shape[0]} embeddings for {n} documents")
    return embeddings


LABEL_NEEDING = ("fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki", "dsir")


def _check_label_columns(sample: pd.DataFrame, cfg: ScoringConfig) -> None:
    """``training.source=corpus``: the corpus must carry the label columns (a clear error, not a KeyError)."""
    needing = [r for r in cfg.raters if r in LABEL_NEEDING]
    missing = [] if ("category" in sample.columns or "extra" in sample.columns) else ["extra (or category)"]
    if set(needing) - {"dsir"} and "quality_label" not in sample.columns:  # the human-label split
        missing.append("quality_label")
    if needing and missing:
        raise ValueError(
            f"scoring.training.source=corpus trains {needing} on the corpus's own labels, but the documents lack "
            f"column(s) {missing} (they have {sorted(sample.columns)}). Use scoring.training.source=reference "
            "(the default: raters trained once on the bundled reference corpus) or add the columns "
            "(data.keep_columns carries them over from the input)")


def _resolve_reference(cfg: ScoringConfig, embedder, reference: ReferenceRaters | None) -> ReferenceRaters | None:
    if cfg.training.source != "reference" or reference is not None:
        return reference
    return ensure_reference(cfg, getattr(embedder, "cfg", None))


def fit_raters(sample: pd.DataFrame, embeddings: np.ndarray | None, cfg: ScoringConfig,
               embedder=None, reference: ReferenceRaters | None = None,
               dsir_raw_counts: Callable[[DSIRImportance, dict[str, Any]], np.ndarray] | None = None,
               ) -> tuple[dict[str, Any], dict[str, float]]:
    """The configured raters for ``sample`` (columns ``id``, ``text``; with ``training.source=corpus``
    also ``extra`` or ``category``, ``quality_label``) and its row-aligned ``embeddings``.

    ``training.source=reference``: the raters that need labels come from ``reference`` (built or
    loaded by :func:`curation.scoring.reference.ensure_reference` when None; the heads' embedding space
    is ``embedder.cfg``); only DSIR's raw model is fitted on the sample. ``corpus``: all are trained on
    the sample. Raters in ``cfg.pretrained_dir`` (or a fastText ``pretrained_path``) are loaded instead
    either way. Returns the raters and the fit's metrics.

    ``dsir_raw_counts(hasher, raters)``: DSIR's raw-side bucket counts of the sample (``training.source=reference``),
    computed by the caller (e.g. per shard on a worker pool: a sum of integer counts, so exact in any
    order), given the raters fitted before DSIR (every other one: the pool's pass scores the sample with them
    while it hashes); None = hash the sample's texts here."""
    sample = sample.reset_index(drop=True)
    on_corpus = cfg.training.source == "corpus"
    if on_corpus:
        _check_label_columns(sample, cfg)
        if "category" not in sample.columns and "extra" in sample.columns:
            sample = sample.assign(category=category_of(sample["extra"]))
    embeddings = _check_embeddings(cfg, embeddings, len(sample))
    metrics: dict[str, float] = {"training/source_reference": float(not on_corpus)}
    raters: dict[str, Any] = {}
    reference = _resolve_reference(cfg, embedder, reference)
    if reference is not None:
        metrics.update({f"reference/{k}": v for k, v in reference.counts.items()})

    def timed(name, fn):
        t0 = time.perf_counter()
        out = fn()
        metrics[f"{name}/seconds"] = time.perf_counter() - t0
        return out

    pretrained = _load_pretrained(cfg, embedder)
    metrics.update({f"{name}/pretrained": 1.0 for name in pretrained})
    row_of = {doc_id: i for i, doc_id in enumerate(sample["id"])}
    for name in ("fasttext_dclm", "fasttext_ultrafineweb"):
        if name not in cfg.raters:
            continue
        ft_cfg = getattr(cfg, name)
        if name not in pretrained and not ft_cfg.pretrained_path and not on_corpus:
            raters[name] = reference.raters[name]
            continue
        rater = pretrained.get(name) or FastTextRater(ft_cfg)
        if name not in pretrained and not ft_cfg.pretrained_path:
            ts = build_training_set(sample, cfg.training)
            _log_counts(metrics, f"{name}/train", ts.counts)
            if not ts.positives or not ts.negatives:
                raise ValueError(
                    f"scoring.training.source=corpus: {name} needs both classes, the corpus's labels give "
                    f"{len(ts.positives)} positives and {len(ts.negatives)} negatives (positives: categories "
                    f"{cfg.training.positive_categories} or quality_label 1; negatives: categories "
                    f"{cfg.training.negative_categories} or quality_label 0, human eval split excluded). "
                    "Use scoring.training.source=reference (the default) or label more documents")
            # preprocessing is per document: fitting on the training rows' texts equals
            # picking them from a preprocessed corpus
            timed(f"{name}/fit", lambda: rater.fit(ts.positives, ts.negatives))
        raters[name] = rater

    if "edu" in cfg.raters:
        if "edu" in pretrained:
            edu = pretrained["edu"]
        elif not on_corpus:
            edu = reference.raters["edu"]
        else:
            table, ann_counts = build_edu_annotations(sample, cfg.edu, cfg.training)
            _log_counts(metrics, "edu/annotations", ann_counts)
            edu = EduRater(cfg.edu, embedder)
            # corpus rows reuse their embedding; rows from an annotation file are embedded here
            from_corpus = table["origin"] != "annotations_file"
            X = np.empty((len(table), embeddings.shape[1]), dtype=np.float32)
            X[from_corpus.to_numpy()] = embeddings[table.loc[from_corpus, "row"].to_numpy(dtype=np.int64)]
            if (~from_corpus).any():  # an annotation file: embed its texts
                X[~from_corpus.to_numpy()] = edu.embed(table.loc[~from_corpus, "text"].tolist())
            timed("edu/fit", lambda: edu.fit_embeddings(X, table["score"].to_numpy(dtype=float)))
        raters["edu"] = edu

    if "wiki" in cfg.raters:
        wiki = pretrained.get("wiki") or (reference.raters["wiki"] if not on_corpus else WikiRater(cfg.wiki, embedder))
        if "wiki" not in pretrained and on_corpus:
            ts = build_training_set(sample, wiki_training_config(cfg.training))
            _log_counts(metrics, "wiki/train", ts.counts)
            if wiki.cfg.features == "embedding":
                idx = [row_of[i] for i in ts.positive_ids + ts.negative_ids]
                y = np.r_[np.ones(len(ts.positive_ids)), np.zeros(len(ts.negative_ids))]
                timed("wiki/fit", lambda: wiki.fit_features(embeddings[idx], y))
            else:
                timed("wiki/fit", lambda: wiki.fit(ts.positives, ts.negatives))
        raters["wiki"] = wiki

    if "dsir" in cfg.raters and not on_corpus:
        # targets from the reference categories; raw = the corpus being scored (its sample), unless
        # raw_categories names reference categories (DSIR Sec. 3: importance of the raw data vs the target)
        names = [f"{target}_importance" for target in cfg.dsir.targets]
        to_fit = [t for t, n in zip(cfg.dsir.targets, names) if n not in pretrained]
        raw_counts = reference.dsir_counts.get("__raw__")
        if to_fit and raw_counts is None and dsir_raw_counts is not None:
            raw_counts = timed("fit/sample_pass", lambda: dsir_raw_counts(DSIRImportance(cfg.dsir.model), dict(raters)))
        elif to_fit and raw_counts is None:
            z = timed("dsir/features", lambda: DSIRImportance(cfg.dsir.model).features(sample["text"].tolist()))
            raw_counts = np.asarray(z.sum(axis=0)).ravel()
            del z
        for target, name in zip(cfg.dsir.targets, names):
            rater = pretrained.get(name)
            if rater is None:
                rater = DSIRImportance(replace(cfg.dsir.model, target=target))
                rater.fit_counts(reference.dsir_counts[target], raw_counts)
            raters[name] = rater
    elif "dsir" in cfg.raters:
        names = [f"{target}_importance" for target in cfg.dsir.targets]
        to_fit = [t for t, n in zip(cfg.dsir.targets, names) if n not in pretrained]
        raw_mask = (sample["category"].isin(cfg.dsir.raw_categories).to_numpy() if cfg.dsir.raw_categories
                    else np.ones(len(sample), bool))
        masks = {t: sample["category"].isin(cfg.dsir.targets[t]).to_numpy() for t in to_fit}
        # one hashing pass over the rows the fits read serves every target
        rows = raw_mask.copy() if to_fit else np.zeros(len(sample), bool)
        for mask in masks.values():
            rows |= mask
        texts = sample["text"].to_numpy()
        hasher = DSIRImportance(cfg.dsir.model)
        z = timed("dsir/features", lambda: hasher.features(texts[rows].tolist())) if rows.any() else None
        for target, name in zip(cfg.dsir.targets, names):
            rater = pretrained.get(name)
            if rater is None:
                rater = DSIRImportance(replace(cfg.dsir.model, target=target))
                tgt = masks[target]
                if not tgt.any():
                    raise ValueError(f"dsir target {target!r}: no document of categories {cfg.dsir.targets[target]}")
                rater.fit_features(z[tgt[rows]], z[raw_mask[rows]])
            raters[name] = rater
    return raters, metrics


def _columns(cfg: ScoringConfig, raters: dict[str, Any]) -> list[str]:
    """Score columns in output order (:func:`~curation.scoring.config.rater_columns`) of the raters fitted."""
    from curation.scoring.config import rater_columns

    return [c for c in rater_columns(cfg) if c in raters or c in SIGNALS]


def in_output_order(scores: pd.DataFrame, cfg: ScoringConfig, raters: dict[str, Any]) -> pd.DataFrame:
    """``id`` and the rater columns of ``scores`` in :func:`apply_scoring`'s order."""
    return scores[["id", *[c for c in _columns(cfg, raters) if c in scores.columns]]]


def dsir_names(names: Iterable[str]) -> list[str]:
    """The DSIR importance raters or columns among ``names`` (``<target>_importance``; a rater dict's keys)."""
    return [n for n in names if n.endswith("_importance")]


def score_dsir(scores: pd.DataFrame, z: Any, raters: Mapping[str, Any], names: Sequence[str],
               counts: dict[str, float]) -> None:
    """Add DSIR's columns ``names`` to ``scores`` from the rows' hashed n-gram counts ``z`` (rows of
    :meth:`DSIRImportance.features`), and their bad-input counts to ``counts``."""
    if z.shape[0] != len(scores):
        raise ValueError(f"dsir_features has {z.shape[0]} rows for {len(scores)} documents")
    for name in names:
        s = raters[name].score_features(z)
        scores[name] = s
        nan = int(np.isnan(s).sum())  # NaN exactly where a document has no n-gram
        _log_counts(counts, name, {"total": len(s), "empty_text": nan, "nan_score": nan})


def apply_scoring(frame: pd.DataFrame, embeddings: np.ndarray | None, cfg: ScoringConfig, raters: dict[str, Any],
                  merge: MergeMap | None, *, only: set[str] | None = None,
                  dsir_features: Any = None) -> tuple[pd.DataFrame, dict[str, float]]:
    """Score the rows of ``frame`` (``id``, ``text``) with fitted ``raters`` and ``merge``.

    Per document, so any batch (a shard, a frame) gives the same rows. Returns ``id`` + one
    column per score (+ ``<c>_0_5`` and ``quality`` with a merge map) and the bad-input counts
    and timings (``<rater>/total``, ``/empty_text``, ``/nan_score`` ...; they add up across
    batches). ``only``: compute just these score columns (the fit's merge sample). ``dsir_features``: the rows'
    DSIR hashed n-gram counts (:meth:`DSIRImportance.features` of ``cfg.dsir.model``), when a caller has them.
    """
    frame = frame.reset_index(drop=True)
    texts = frame["text"].tolist()
    embeddings = _check_embeddings(cfg, embeddings, len(frame)) if not only or only & {"edu", "wiki"} else None
    wanted = set(_columns(cfg, raters)) if only is None else set(only)
    scores = pd.DataFrame({"id": frame["id"].to_numpy()})
    counts: dict[str, float] = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        out = fn()
        counts[f"{name}/seconds"] = counts.get(f"{name}/seconds", 0.0) + time.perf_counter() - t0
        return out

    for name in ("fasttext_dclm", "fasttext_ultrafineweb"):
        if name in raters and name in wanted:
            rater = raters[name]
            prepared = timed(f"{name}/preprocess", lambda: rater.preprocess(texts))
            s, c = timed(f"{name}/score", lambda: rater.score_prepared_counted(prepared))
            scores[name] = s
            _log_counts(counts, name, c)
    for name in ("edu", "wiki"):
        if name not in raters or name not in wanted:
            continue
        rater = raters[name]
        if name == "edu" or rater.cfg.features == "embedding":
            s = rater.score_embeddings(embeddings) if len(frame) else np.empty(0)
            empty = rater.empty_mask(texts)
            s[empty] = np.nan
            c = {"total": len(s), "empty_text": int(empty.sum()), "nan_score": int(np.isnan(s).sum())}
        elif texts:
            s, c = rater.score_counted(texts)
        else:  # an empty shard (sklearn's hashing refuses an empty input)
            s, c = np.empty(0), {"total": 0, "empty_text": 0, "nan_score": 0}
        scores[name] = s
        _log_counts(counts, name, c)
    dsir = [n for n in dsir_names(raters) if n in wanted]
    if dsir:
        if dsir_features is not None:
            z = dsir_features
        elif texts:
            z = timed("dsir/features", lambda: DSIRImportance(cfg.dsir.model).features(texts))
        else:  # an empty shard (sklearn's hashing refuses an empty input)
            from scipy.sparse import csr_matrix

            z = csr_matrix((0, cfg.dsir.model.buckets))
        score_dsir(scores, z, raters, dsir, counts)
    if "redpajama" in cfg.raters and wanted & set(SIGNALS):
        signals, c = timed("redpajama/score", lambda: RedPajamaSignals().score_counted(texts))
        for col in signals.columns:
            scores[col] = signals[col].to_numpy()
        _log_counts(counts, "redpajama", c)
    scores = in_output_order(scores, cfg, raters)
    if merge is not None and only is None:
        scores, c = merge.apply(scores)
        _log_counts(counts, "merge", c)
    return scores, counts


APPLY_CHUNK_DOCS = 10_000  # rows per apply_scoring call when the fit scores its own sample


def fit_scoring(sample: pd.DataFrame, embeddings: np.ndarray | None, cfg: ScoringConfig,
                embedder=None, reference: ReferenceRaters | None = None, *,
                dsir_raw_counts: Callable[[DSIRImportance, dict[str, Any]], np.ndarray] | None = None,
                sample_components: Callable[[dict[str, Any], list[str]], pd.DataFrame] | None = None,
                ) -> FittedScoring:
    """Raters (:func:`fit_raters`), the merge map from ``sample`` (and its row-aligned embeddings) and
    the eval ROC-AUC on the held-out human labels: the reference's (``training.source=reference``) or
    the sample's own (``corpus``).

    The work over the whole sample can be handed to the caller, which may spread it over a worker pool
    in one pass (``curation.scoring.sharded``): ``dsir_raw_counts`` (see :func:`fit_raters`) and
    ``sample_components(raters, columns)``, the sample's scores in ``columns`` in sample order (what
    :func:`apply_scoring` gives: a document's scores depend on that document alone)."""
    sample = sample.reset_index(drop=True)
    reference = _resolve_reference(cfg, embedder, reference)
    raters, metrics = fit_raters(sample, embeddings, cfg, embedder, reference, dsir_raw_counts)
    merge = None
    components = {*cfg.merge.components, cfg.merge.reference}
    if components <= set(_columns(cfg, raters)):
        # the sample's component scores define the map (DATAMASK A.5 quantile mapping)
        t0 = time.perf_counter()
        if sample_components is not None:
            part = sample_components(raters, sorted(components))
            if len(part) != len(sample) or not (part["id"].to_numpy() == sample["id"].to_numpy()).all():
                raise RuntimeError("sample_components returned other rows than the sample's, or in another order")
        else:
            # in chunks: a rater's per-call copies (preprocessed texts, features) stay bounded by the chunk
            parts = []
            for start in range(0, len(sample), APPLY_CHUNK_DOCS):
                rows = slice(start, start + APPLY_CHUNK_DOCS)
                emb = None if embeddings is None else embeddings[rows]
                parts.append(apply_scoring(sample.iloc[rows].reset_index(drop=True), emb, cfg, raters, None,
                                           only=components)[0])
            part = pd.concat(parts, ignore_index=True) if parts else \
                apply_scoring(sample, embeddings, cfg, raters, None, only=components)[0]
        merge = MergeMap.fit(part, cfg.merge)
        metrics["merge/map_seconds"] = time.perf_counter() - t0
        metrics["merge/map_docs"] = float(len(sample))
    # eval ROC-AUC of every score column on the sample's held-out human labels (higher = better
    # quality; a signal where lower is better shows as AUC < 0.5). Only the eval rows are scored.
    held_out, emb = None, None
    if reference is not None:  # the reference's held-out rows (never trained on), scored by this run's raters
        emb = reference.eval_embeddings if needs_embeddings(cfg) else None
        if emb is not None or not needs_embeddings(cfg):  # (heads from a pretrained_dir: no eval vectors)
            held_out = reference.eval_rows
    elif "quality_label" in sample.columns:
        split = human_label_split(sample, cfg.training.eval_fraction, cfg.training.split_salt).to_numpy()
        rows = np.flatnonzero(split == EVAL)
        if rows.size:
            held_out = sample.iloc[rows].reset_index(drop=True)
            emb = None if embeddings is None or not needs_embeddings(cfg) else np.asarray(embeddings)[rows]
    if held_out is not None and len(held_out):
        scored, _ = apply_scoring(held_out, emb, cfg, raters, merge)
        for col in scored.columns.drop("id"):
            res = eval_roc_auc(held_out, scored[col].to_numpy(), cfg.training)
            metrics[f"roc_auc/{col}"] = res["roc_auc"]
            metrics["roc_auc/n_eval"] = res["n_eval"]
    metrics["fit/sample_docs"] = float(len(sample))
    return FittedScoring(raters=raters, merge=merge, metrics=metrics)


def score_corpus(
    df: pd.DataFrame,
    cfg: ScoringConfig | None = None,
    embeddings: np.ndarray | None = None,
    embedder=None,
    reference: ReferenceRaters | None = None,
) -> ScoringResult:
    """Fit the raters in ``cfg.raters`` on a sample of ``df`` (``cfg.fit_sample_docs``; all rows of
    a corpus that small) and apply them to every row; add ``quality`` if its components ran.

    ``embeddings`` (n_docs, d), row-aligned with ``df``, saves re-embedding;
    otherwise ``embedder`` (or the default SentenceEmbedder) computes them. With
    ``training.source=reference`` the reference raters are ``reference``, or built for
    ``embedder.cfg``'s embedding space (pass the embedder that made ``embeddings``).
    """
    cfg = cfg or ScoringConfig()
    df = df.reset_index(drop=True)
    metrics: dict[str, float] = {}
    if needs_embeddings(cfg) and embeddings is None:
        from curation.embedding import SentenceEmbedder

        embedder = embedder or SentenceEmbedder()
        t0 = time.perf_counter()
        embeddings = np.asarray(embedder(df["text"].tolist()), dtype=np.float32)
        metrics["embed/seconds"] = time.perf_counter() - t0
    embeddings = _check_embeddings(cfg, embeddings, len(df))
    threshold = sample_threshold([df["id"]], cfg.fit_sample_docs)
    rows = np.flatnonzero(sample_mask(df["id"], threshold))
    fitted = fit_scoring(df.iloc[rows], None if embeddings is None else embeddings[rows], cfg, embedder, reference)
    scores, counts = apply_scoring(df, embeddings, cfg, fitted.raters, fitted.merge)
    metrics.update(fitted.metrics)
    metrics.update(counts)
    return ScoringResult(scores=scores, metrics=metrics, raters=fitted.raters)
