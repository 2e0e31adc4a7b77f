"""score_corpus end to end on 160 real documents with their real embeddings."""

import numpy as np
import pytest

from curation.scoring import SIGNALS, quality_share, score_corpus, scoring_config_from_dict


@pytest.fixture(scope="module")
def result(embed_subset, subset_embeddings, embedder):
    cfg = scoring_config_from_dict(
        {
            "training": {"source": "corpus"},  # these rows' own labels (reference: test_scoring_reference.py)
            # small hash tables keep the test light; min_count 1: 160 docs are too few for 5
            "fasttext_dclm": {"bucket": 20000, "thread": 1, "quantize": False},
            "fasttext_ultrafineweb": {"bucket": 20000, "thread": 1, "min_count": 1, "quantize": False},
            "edu": {"max_per_rule": 16},
            # the subset has no books; wikipedia_importance is the target here
            "dsir": {"targets": {"wikipedia": ["encyclopedic"]}},
        }
    )
    return score_corpus(embed_subset, cfg, embeddings=subset_embeddings, embedder=embedder)


def test_one_row_per_document_one_column_per_score(result, embed_subset):
    s = result.scores
    assert len(s) == len(embed_subset) and (s["id"].to_numpy() == embed_subset["id"].to_numpy()).all()
    expected = {"fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki", "wikipedia_importance", *SIGNALS}
    assert expected <= set(s.columns)
    assert {"fasttext_dclm_0_5", "edu_0_5", "wiki_0_5", "quality"} <= set(s.columns)


def test_quality_in_0_15_and_share_table(result):
    q = result.scores["quality"]
    assert q.notna().all() and q.between(0, 15).all()
    share = quality_share(q)
    assert share["count"].sum() == len(q)


def test_metrics_hold_counts_and_roc_auc(result, embed_subset):
    m = result.metrics
    assert m["fasttext_dclm/total"] == m["edu/total"] == 160
    assert m["fasttext_dclm/empty_text"] == 0
    assert m["fasttext_dclm/train/positives"] == m["fasttext_dclm/train/negatives"] > 0
    # The AUC recomputed here from the held-out human labels and the scores of the same documents: the
    # sample is the whole frame (160 <= fit_sample_docs), so result.scores hold what the metric was computed on.
    from sklearn.metrics import roc_auc_score

    from curation.scoring.training_sets import EVAL, human_label_split

    assert m["fit/sample_docs"] == len(embed_subset)
    held_out = (human_label_split(embed_subset) == EVAL).to_numpy()
    labels = embed_subset["quality_label"].to_numpy(dtype=float, na_value=np.nan)[held_out]
    assert m["roc_auc/n_eval"] == held_out.sum() > 5 and 0 < labels.sum() < len(labels)
    for col in ("fasttext_dclm", "edu", "wiki", "quality"):
        expected = roc_auc_score(labels, result.scores[col].to_numpy()[held_out])
        assert m[f"roc_auc/{col}"] == pytest.approx(expected, abs=1e-9), col
    # and they separate the human labels (measured: DCLM 0.95, merged quality 0.85; a flipped score reads < 0.5)
    assert m["roc_auc/fasttext_dclm"] > 0.8 and m["roc_auc/quality"] > 0.7
    assert set(result.raters) >= {"fasttext_dclm", "edu", "wiki", "wikipedia_importance"}


def test_misaligned_embeddings_are_refused(embed_subset, subset_embeddings):
    cfg = scoring_config_from_dict({"raters": ["edu"]})
    with pytest.raises(ValueError, match="embeddings for"):
        score_corpus(embed_subset, cfg, embeddings=subset_embeddings[:10])
