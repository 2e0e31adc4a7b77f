"""Training sets for the classifier raters, the human-label split, eval ROC-AUC.

The corpus has human quality labels only on the 496 ``dclm_human_labeled`` rows
(``quality_label`` 1 = high, 0 = low). They serve twice: the *train* split may
add positives/negatives to a rater's training set, the *eval* split is held out
from every training set and measures each rater (ROC-AUC of the score against
the label). The split is a stable hash of the document id, so it is the same in
every process, run and shard.

Defaults follow the issue: positives are the encyclopedic and book categories
plus human label 1 in the train split; negatives are random web (crawl)
documents, sampled to the number of positives (balanced, as DCLM and
Ultra-FineWeb Sec. 2.5 train on equal halves).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

EVAL = "eval"
TRAIN = "train"


@dataclass
class TrainingSetConfig:
    """Where positives and negatives of a binary rater come from."""

    # reference: the raters that need labels are trained once on the reference corpus (the bundled
    # corpus, curation.scoring.reference) and applied to any corpus, which then needs only id + text;
    # corpus: trained on the scored corpus's own categories and labels (extra / category, quality_label)
    source: str = "reference"
    # the reference corpus: parquet files with id, text, quality_label, extra (relative to the project root)
    reference_path: str = "data/01_raw/corpus"
    # extra.category values whose documents are positives
    positive_categories: list[str] = field(default_factory=lambda: ["encyclopedic", "books"])
    # extra.category values whose documents are the random-crawl negative pool
    negative_categories: list[str] = field(default_factory=lambda: ["web"])
    # add train-split rows with quality_label == 1 to the positives
    human_positives: bool = True
    # add train-split rows with quality_label == 0 to the negatives
    human_negatives: bool = True
    # sample negatives down (or positives, if fewer negatives) to equal counts
    balance: bool = True
    # cap on each class after balancing; None = no cap
    max_per_class: int | None = None
    # fraction of human-labelled rows held out for evaluation (by id hash)
    eval_fraction: float = 0.5
    # salt of the id hash; change it to draw another split
    split_salt: str = "curation-human-split-v1"
    # seed of the negative sampling
    seed: int = 0
    # share of the documents (salted id hash) that no rater trains on: held out for unbiased
    # measurements such as Meta-rater's validation sets (issue #27); 0 = none (the digests of
    # existing reference raters do not change)
    holdout_fraction: float = 0.0
    # salt of that hash
    holdout_salt: str = "curation-holdout-v1"


def category_of(extra: pd.Series) -> pd.Series:
    """``extra`` JSON strings -> their ``category`` field."""
    return extra.map(lambda s: json.loads(s).get("category") if isinstance(s, str) else None)


def _id_unit_interval(doc_id: str, salt: str) -> float:
    # sha1 rather than hash(): Python's str hash is salted per process
    h = hashlib.sha1(f"{salt}:{doc_id}".encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def human_label_split(df: pd.DataFrame, eval_fraction: float = 0.5, salt: str = TrainingSetConfig.split_salt) -> pd.Series:
    """Per row: ``"train"`` / ``"eval"`` for human-labelled rows, ``None`` otherwise.

    Reads columns ``id`` and ``quality_label``.
    """
    labelled = df["quality_label"].notna().to_numpy()
    out = np.full(len(df), None, dtype=object)
    for i in np.flatnonzero(labelled):
        out[i] = EVAL if _id_unit_interval(str(df["id"].iloc[i]), salt) < eval_fraction else TRAIN
    return pd.Series(out, index=df.index, name="human_split")


def holdout_rows(ids, fraction: float, salt: str = TrainingSetConfig.holdout_salt) -> np.ndarray:
    """Bool per id: in the reserved hold-out share ``fraction`` (a salted id hash), which no rater trains on."""
    if fraction <= 0:
        return np.zeros(len(ids), dtype=bool)
    return np.fromiter((_id_unit_interval(str(i), salt) < fraction for i in ids), dtype=bool, count=len(ids))


@dataclass
class TrainingSet:
    """Texts of both classes plus the counts that went into them."""

    positives: list[str]
    negatives: list[str]
    positive_ids: list[str]
    negative_ids: list[str]
    counts: dict[str, int]


def build_training_set(df: pd.DataFrame, cfg: TrainingSetConfig | None = None) -> TrainingSet:
    """Positive and negative documents for a binary quality rater.

    Reads columns ``id``, ``text``, ``quality_label`` and ``extra`` (or a
    ``category`` column if present). Rows of the human eval split never enter.
    """
    cfg = cfg or TrainingSetConfig()
    cat = df["category"] if "category" in df.columns else category_of(df["extra"])
    split = human_label_split(df, cfg.eval_fraction, cfg.split_salt)
    label = df["quality_label"]
    held = holdout_rows(df["id"].tolist(), cfg.holdout_fraction, cfg.holdout_salt)
    not_eval = (split != EVAL).to_numpy() & ~held

    pos = cat.isin(cfg.positive_categories).to_numpy() & not_eval
    neg = cat.isin(cfg.negative_categories).to_numpy() & not_eval
    is_train = (split == TRAIN).to_numpy() & ~held
    if cfg.human_positives:
        pos |= is_train & (label == 1).fillna(False).to_numpy(dtype=bool)
    if cfg.human_negatives:
        neg |= is_train & (label == 0).fillna(False).to_numpy(dtype=bool)
    # a human label overrides the category: a low-rated page is never a positive
    pos &= ~(label == 0).fillna(False).to_numpy(dtype=bool)
    neg &= ~(label == 1).fillna(False).to_numpy(dtype=bool)
    neg &= ~pos

    rng = np.random.default_rng(cfg.seed)
    pos_idx, neg_idx = np.flatnonzero(pos), np.flatnonzero(neg)
    if cfg.balance:
        k = min(len(pos_idx), len(neg_idx))
        pos_idx = np.sort(rng.choice(pos_idx, k, replace=False))
        neg_idx = np.sort(rng.choice(neg_idx, k, replace=False))
    if cfg.max_per_class is not None:
        pos_idx = np.sort(rng.choice(pos_idx, min(cfg.max_per_class, len(pos_idx)), replace=False))
        neg_idx = np.sort(rng.choice(neg_idx, min(cfg.max_per_class, len(neg_idx)), replace=False))

    texts, ids = df["text"], df["id"]
    counts = {
        "positive_pool": int(pos.sum()),
        "negative_pool": int(neg.sum()),
        "positives": len(pos_idx),
        "negatives": len(neg_idx),
        "human_eval_held_out": int((split == EVAL).sum()),
        "human_train": int(is_train.sum()),
    }
    return TrainingSet(
        positives=texts.iloc[pos_idx].tolist(),
        negatives=texts.iloc[neg_idx].tolist(),
        positive_ids=ids.iloc[pos_idx].tolist(),
        negative_ids=ids.iloc[neg_idx].tolist(),
        counts=counts,
    )


def eval_roc_auc(df: pd.DataFrame, scores: np.ndarray | pd.Series, cfg: TrainingSetConfig | None = None) -> dict[str, float]:
    """ROC-AUC of ``scores`` (aligned with ``df`` rows) on the held-out human labels.

    Higher score must mean higher quality. NaN scores are left out and counted
    (``n_nan``), never imputed. Returns ``{"roc_auc", "n_eval", "n_pos", "n_neg", "n_nan"}``.
    """
    from sklearn.metrics import roc_auc_score

    cfg = cfg or TrainingSetConfig()
    split = human_label_split(df, cfg.eval_fraction, cfg.split_salt).to_numpy()
    s = np.asarray(scores, dtype=np.float64)
    if s.shape[0] != len(df):
        raise ValueError(f"{s.shape[0]} scores for {len(df)} rows")
    in_eval = split == EVAL
    finite = np.isfinite(s)
    use = in_eval & finite
    y = df["quality_label"].to_numpy(dtype=np.float64, na_value=np.nan)[use]
    n_pos, n_neg = int((y == 1).sum()), int((y == 0).sum())
    auc = float(roc_auc_score(y, s[use])) if n_pos and n_neg else float("nan")
    return {"roc_auc": auc, "n_eval": int(use.sum()), "n_pos": n_pos, "n_neg": n_neg, "n_nan": int((in_eval & ~finite).sum())}
