"""Quantile mapping onto the Edu scale and the 0-15 quality (DATAMASK Appendix A.5)."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from curation.scoring import MergeConfig, merge_quality, quality_share, quantile_map


@pytest.fixture(scope="module")
def real_scores(corpus_sample):
    """Three real, differently shaped score columns of the sample documents."""
    from curation.scoring.redpajama import RedPajamaSignals

    f = RedPajamaSignals().score_frame(corpus_sample["text"].tolist())
    edu_like = np.clip(f["doc_mean_word_length"].to_numpy() - 2.0, 0, 5)  # 0-5 reference
    return pd.DataFrame(
        {
            "fasttext_dclm": f["doc_unigram_entropy"].to_numpy(),
            "edu": edu_like,
            "wiki": f["lines_ending_with_terminal_punctution_mark"].to_numpy(),
        }
    )


def test_quantile_map_preserves_order_and_lands_in_0_5(real_scores):
    x = real_scores["fasttext_dclm"].to_numpy()
    ref = real_scores["edu"].to_numpy()
    y = quantile_map(x, ref)
    assert np.all((y >= 0) & (y <= 5))
    assert y.min() >= ref.min() and y.max() <= ref.max()
    order = np.argsort(x, kind="stable")
    assert np.all(np.diff(y[order]) >= 0)  # monotone non-decreasing
    assert spearmanr(x, y).statistic == pytest.approx(1.0)
    # mapped values follow the reference distribution
    np.testing.assert_allclose(np.quantile(y, [0.1, 0.5, 0.9]), np.quantile(ref, [0.1, 0.5, 0.9]), atol=0.1)


def test_quantile_map_ties_and_nan(real_scores):
    x = real_scores["wiki"].to_numpy()  # many ties (fractions of few lines)
    y = quantile_map(x, real_scores["edu"].to_numpy())
    for v in np.unique(x[np.isfinite(x)])[:5]:
        assert np.ptp(y[x == v]) == 0.0
    x2 = x.copy()
    x2[:3] = np.nan
    assert np.isnan(quantile_map(x2, real_scores["edu"].to_numpy())[:3]).all()


def test_merged_quality_is_in_0_15_with_share_table(real_scores):
    merged, counts = merge_quality(real_scores)
    q = merged["quality"].to_numpy()
    assert np.all((q >= 0) & (q <= 15))
    for c in ("fasttext_dclm", "edu", "wiki"):
        assert merged[f"{c}_0_5"].between(0, 5).all()
    assert counts["nan_quality"] == 0
    share = quality_share(merged["quality"])
    assert list(share["score"]) == list(range(16))
    assert share["count"].sum() == len(merged) and share["share"].sum() == pytest.approx(1.0)


def test_nan_components_are_counted_under_both_policies(real_scores):
    s = real_scores.copy()
    s.loc[:4, "wiki"] = np.nan
    floor, counts = merge_quality(s)
    assert counts["nan_wiki"] == 5 and counts["nan_quality"] == 0
    assert (floor.loc[:4, "wiki_0_5"] == 0).all()
    nan, counts = merge_quality(s, MergeConfig(nan_policy="nan"))
    assert counts["nan_quality"] == 5 and nan["quality"].isna().sum() == 5
    share = quality_share(nan["quality"])
    assert share.iloc[-1]["score"] == -1 and share.iloc[-1]["count"] == 5


def test_components_and_reference_are_config(real_scores):
    merged, _ = merge_quality(real_scores, MergeConfig(components=["fasttext_dclm", "edu"], reference="edu"))
    assert merged["quality"].between(0, 10).all()
    with pytest.raises(KeyError, match="missing score columns"):
        merge_quality(real_scores, MergeConfig(components=["nope", "edu"]))


def test_quality_is_the_sum_of_the_three_mapped_components_by_hand():
    """DATAMASK App. A.5 "we sum these three scores", worked by hand on five documents.

    Edu (the reference) is clipped to 0-5: [0, 1, 2, 3, 7] -> [0, 1, 2, 3, 5]. A value's mid-rank
    percentile p is (#below + #equal / 2) / 5, and it maps to the Edu quantile at p with linear
    interpolation, i.e. at position 4p of the sorted Edu values [0, 1, 2, 3, 5]:
      DCLM [10, 20, 30, 40, 50]: p = .1 .3 .5 .7 .9 -> position .4 1.2 2 2.8 3.6 -> .4 1.2 2 2.8 4.2
      Wiki [5, 4, 4, 1, 0] (4 tied): p = .9 .6 .6 .3 .1 -> position 3.6 2.4 2.4 1.2 .4 -> 4.2 2.4 2.4 1.2 .4
    quality = Edu + DCLM + Wiki = [4.6, 4.6, 6.4, 7.0, 9.6] (the max of the three would be [4.2, 2.4, 2.4, 3, 5]).
    """
    scores = pd.DataFrame({"fasttext_dclm": [10.0, 20.0, 30.0, 40.0, 50.0], "edu": [0.0, 1.0, 2.0, 3.0, 7.0],
                           "wiki": [5.0, 4.0, 4.0, 1.0, 0.0]})
    merged, counts = merge_quality(scores)
    np.testing.assert_allclose(merged["edu_0_5"], [0.0, 1.0, 2.0, 3.0, 5.0])
    np.testing.assert_allclose(merged["fasttext_dclm_0_5"], [0.4, 1.2, 2.0, 2.8, 4.2])
    np.testing.assert_allclose(merged["wiki_0_5"], [4.2, 2.4, 2.4, 1.2, 0.4])
    np.testing.assert_allclose(merged["quality"], [4.6, 4.6, 6.4, 7.0, 9.6])
    assert counts["nan_quality"] == 0
    # a NaN component counts as the bottom of the scale (0) in the sum: Wiki's NaN drops document 0 by 4.2
    scores.loc[0, "wiki"] = np.nan
    floored, counts = merge_quality(scores)
    assert counts["nan_wiki"] == 1
    # Wiki [nan, 4, 4, 1, 0] over its 4 finite values: p = .75 .75 .375 .125 -> position 3 3 1.5 .5
    np.testing.assert_allclose(floored["wiki_0_5"], [0.0, 3.0, 3.0, 1.5, 0.5])
    np.testing.assert_allclose(floored["quality"], [0.4, 5.2, 7.0, 7.3, 9.7])
