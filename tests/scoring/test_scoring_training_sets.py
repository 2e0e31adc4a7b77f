"""Training sets from config, the human-label split, eval ROC-AUC (real corpus rows)."""

import numpy as np
import pytest

from curation.scoring import TrainingSetConfig, build_training_set, eval_roc_auc, human_label_split


def test_split_is_stable_and_independent_of_row_order(corpus_sample):
    a = human_label_split(corpus_sample)
    shuffled = corpus_sample.sample(frac=1.0, random_state=3)
    b = human_label_split(shuffled).reindex(corpus_sample.index)
    assert (a.fillna("-") == b.fillna("-")).all()
    labelled = corpus_sample["quality_label"].notna()
    assert a[labelled].isin(["train", "eval"]).all() and a[~labelled].isna().all()
    # eval_fraction 0.5 on 496 rows: both halves substantial
    assert 150 < (a == "eval").sum() < 350


def test_eval_rows_never_enter_training(corpus_sample):
    ts = build_training_set(corpus_sample)
    split = human_label_split(corpus_sample)
    eval_ids = set(corpus_sample.loc[split == "eval", "id"])
    assert eval_ids.isdisjoint(ts.positive_ids) and eval_ids.isdisjoint(ts.negative_ids)
    assert ts.counts["human_eval_held_out"] == len(eval_ids)


def test_default_positives_are_encyclopedic_books_and_train_label_1(corpus_sample):
    ts = build_training_set(corpus_sample, TrainingSetConfig(balance=False))
    rows = corpus_sample.set_index("id")
    pos = rows.loc[ts.positive_ids]
    human = pos["quality_label"].notna()
    assert set(pos.loc[~human, "category"]) == {"encyclopedic", "books"}
    assert (pos.loc[human, "quality_label"] == 1).all() and human.sum() > 50
    neg = rows.loc[ts.negative_ids]
    assert set(neg["category"]) == {"web"}
    assert not (neg["quality_label"] == 1).any()
    assert set(ts.positive_ids).isdisjoint(ts.negative_ids)


def test_balance_and_cap(corpus_sample):
    ts = build_training_set(corpus_sample, TrainingSetConfig(balance=True))
    assert len(ts.positives) == len(ts.negatives) == min(ts.counts["positive_pool"], ts.counts["negative_pool"])
    capped = build_training_set(corpus_sample, TrainingSetConfig(max_per_class=30))
    assert len(capped.positives) == len(capped.negatives) == 30


def test_eval_roc_auc_of_the_labels_themselves_is_one_and_nan_is_counted(corpus_sample):
    y = corpus_sample["quality_label"].to_numpy(dtype=float, na_value=np.nan)
    res = eval_roc_auc(corpus_sample, y)
    assert res["roc_auc"] == 1.0 and res["n_nan"] == 0
    assert res["n_pos"] > 0 and res["n_neg"] > 0
    flipped = eval_roc_auc(corpus_sample, -y)
    assert flipped["roc_auc"] == 0.0
    s = np.where(np.isnan(y), 0.0, y)
    eval_rows = np.flatnonzero(human_label_split(corpus_sample).to_numpy() == "eval")
    s[eval_rows[:5]] = np.nan
    res = eval_roc_auc(corpus_sample, s)
    assert res["n_nan"] == 5 and res["n_eval"] == len(eval_rows) - 5


def test_eval_roc_auc_refuses_misaligned_scores(corpus_sample):
    with pytest.raises(ValueError, match="scores for"):
        eval_roc_auc(corpus_sample, np.zeros(3))
