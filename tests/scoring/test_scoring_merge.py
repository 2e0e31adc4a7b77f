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


# --- a fitted map applied to new rows, edge cases, persistence: hand-computed (issue #28) ---


def _hand_scores():
    return pd.DataFrame({"fasttext_dclm": [10.0, 20.0, 30.0, 40.0, 50.0], "edu": [0.0, 1.0, 2.0, 3.0, 7.0],
                         "wiki": [5.0, 4.0, 4.0, 1.0, 0.0]})


def test_a_fitted_map_sends_new_values_to_the_sample_cdf_then_the_edu_quantile():
    from curation.scoring import MergeMap

    fitted = MergeMap.fit(_hand_scores())  # default config: dclm, edu, wiki onto edu clipped to [0, 5]
    assert fitted.reference.tolist() == [0.0, 1.0, 2.0, 3.0, 5.0]
    assert fitted.samples["fasttext_dclm"].tolist() == [10.0, 20.0, 30.0, 40.0, 50.0]
    assert set(fitted.samples) == {"fasttext_dclm", "wiki"}  # the reference is not mapped
    # p = (#below + #equal / 2) / 5: 5 -> 0, 10 -> .1, 25 -> .4, 60 -> 1; Q_ref at position 4p of [0, 1, 2, 3, 5]
    out = fitted.map("fasttext_dclm", [5.0, 10.0, 25.0, 60.0, None])  # None: a missing score
    np.testing.assert_allclose(out[:4], [0.0, 0.4, 1.6, 5.0], rtol=0, atol=1e-12)
    assert np.isnan(out[4])
    new = pd.DataFrame({"fasttext_dclm": [25.0, np.nan], "edu": [-1.0, 2.5], "wiki": [4.0, 9.0]})
    merged, counts = fitted.apply(new)
    np.testing.assert_allclose(merged["edu_0_5"], [0.0, 2.5])  # the new reference values clipped to [0, 5]
    np.testing.assert_allclose(merged["wiki_0_5"], [2.4, 5.0])  # 4 -> p .6 -> 2.4; 9 above the sample -> 5
    np.testing.assert_allclose(merged["fasttext_dclm_0_5"], [1.6, 0.0])  # NaN -> the floor 0
    np.testing.assert_allclose(merged["quality"], [4.0, 7.5])
    assert counts == {"nan_fasttext_dclm": 1, "nan_edu": 0, "nan_wiki": 0, "nan_quality": 0}
    assert list(new.columns) == ["fasttext_dclm", "edu", "wiki"]  # the input is not modified


def test_nan_policy_nan_and_the_output_column_name():
    from curation.scoring import MergeMap

    cfg = MergeConfig(nan_policy="nan", output_column="merged", scale_min=1.0, scale_max=4.0)
    fitted = MergeMap.fit(_hand_scores(), cfg)
    assert fitted.reference.tolist() == [1.0, 1.0, 2.0, 3.0, 4.0]  # edu clipped to [1, 4]
    new = pd.DataFrame({"fasttext_dclm": [np.nan, 50.0], "edu": [2.0, 9.0], "wiki": [0.0, 5.0]})
    merged, counts = fitted.apply(new)
    assert "quality" not in merged.columns
    assert np.isnan(merged["merged"][0]) and np.isnan(merged["fasttext_dclm_0_5"][0])
    # 50 -> p .9 -> position 3.6 of [1, 1, 2, 3, 4] -> 3.6; edu 9 -> 4; wiki 5 -> p .9 -> 3.6
    assert merged["merged"][1] == pytest.approx(3.6 + 4.0 + 3.6, abs=1e-12)
    assert counts == {"nan_fasttext_dclm": 1, "nan_edu": 0, "nan_wiki": 0, "nan_merged": 1}


def test_merge_config_errors():
    from curation.scoring import MergeMap

    with pytest.raises(ValueError, match="nan_policy must be floor or nan, got 'zero'"):
        merge_quality(_hand_scores(), MergeConfig(nan_policy="zero"))
    with pytest.raises(KeyError, match=r"merge_quality: missing score columns \['nope', 'ref'\]"):
        merge_quality(_hand_scores(), MergeConfig(components=["nope", "edu"], reference="ref"))
    no_edu = _hand_scores().assign(edu=np.nan)
    with pytest.raises(ValueError, match="^quantile_map: the reference has no finite value$"):
        MergeMap.fit(no_edu)
    # the reference alone needs nothing to map onto it: no error, and every edu NaN is counted
    merged, counts = merge_quality(no_edu, MergeConfig(components=["edu"]))
    assert merged["quality"].tolist() == [0.0] * 5 and counts == {"nan_edu": 5, "nan_quality": 0}


def test_a_component_without_any_finite_sample_value_maps_to_nan():
    from curation.scoring import MergeMap

    scores = _hand_scores().assign(wiki=np.nan)
    fitted = MergeMap.fit(scores)
    assert fitted.samples["wiki"].size == 0
    assert np.isnan(fitted.map("wiki", np.array([1.0, 2.0]))).all()
    merged, counts = fitted.apply(scores)
    assert counts["nan_wiki"] == 5 and merged["wiki_0_5"].tolist() == [0.0] * 5


def test_quantile_map_edge_cases():
    np.testing.assert_allclose(quantile_map([3.0, 1.0, 2.0], [np.nan, 0.0, 10.0]), [25 / 3, 5 / 3, 5.0])
    out = quantile_map([np.nan, np.nan], [1.0, 2.0])
    assert out.shape == (2,) and np.isnan(out).all()
    with pytest.raises(ValueError, match="^quantile_map: the reference has no finite value$"):
        quantile_map([1.0], [np.nan, np.inf])


def test_a_saved_map_loads_back_equal(tmp_path):
    from curation.scoring import MergeMap

    cfg = MergeConfig(components=["fasttext_dclm", "edu"], nan_policy="nan", output_column="q", scale_max=4.0)
    fitted = MergeMap.fit(_hand_scores(), cfg)
    fitted.save(tmp_path / "map.npz")
    loaded = MergeMap.load(tmp_path / "map.npz")
    assert loaded.cfg == cfg
    assert loaded.reference.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert list(loaded.samples) == ["fasttext_dclm"]
    assert loaded.samples["fasttext_dclm"].tolist() == [10, 20, 30, 40, 50]
    pd.testing.assert_frame_equal(loaded.apply(_hand_scores())[0], fitted.apply(_hand_scores())[0])


def test_quality_share_bins_clips_and_counts_nan_by_hand():
    share = quality_share(np.array([-0.5, 0.0, 3.99, 4.0, 15.0, 16.2, np.nan]))
    assert share["score"].tolist() == list(range(16)) + [-1]
    assert share["count"].tolist() == [2, 0, 0, 1, 1] + [0] * 10 + [2, 1]
    np.testing.assert_allclose(share["share"][:16], np.array([2, 0, 0, 1, 1] + [0] * 10 + [2]) / 6)
    assert np.isnan(share["share"].iloc[16])
    one = quality_share([7.0], max_score=10)
    assert one["score"].tolist() == list(range(11)) and one["share"].tolist() == [0.0] * 7 + [1.0] + [0.0] * 3


def test_quality_share_nan_row_is_row_16_of_the_same_three_columns():
    share = quality_share([7.0, None, np.nan])  # None is a missing score, as NaN is
    assert list(share.columns) == ["score", "count", "share"]
    assert share.index.tolist() == list(range(17))
    assert (share.loc[16, "score"], share.loc[16, "count"]) == (-1, 2) and share.loc[7, "share"] == 1.0


def test_quantile_map_reads_none_as_missing():
    out = quantile_map([None, 1.0, 3.0], [0.0, None, 4.0])
    assert np.isnan(out[0]) and out[1:].tolist() == [1.0, 3.0]  # p = .25, .75 of [0, 4]


def test_object_score_columns_with_none_are_read_as_floats():
    # e.g. rows built from records where a rater returned None: a missing score (floored), not a crash
    scores = _hand_scores().astype(object)
    scores.loc[0, "wiki"] = None
    scores.loc[4, "edu"] = None
    merged, counts = merge_quality(scores)
    assert (counts["nan_wiki"], counts["nan_edu"]) == (1, 1)
    # edu [0, 1, 2, 3] (clipped) is the reference; dclm 10 -> p .1 -> position .3 of [0, 1, 2, 3] -> .3
    assert merged["edu_0_5"].tolist() == [0.0, 1.0, 2.0, 3.0, 0.0]
    assert merged["fasttext_dclm_0_5"][0] == pytest.approx(0.3, abs=1e-12)
    assert merged["wiki_0_5"][0] == 0.0
