from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.pruning import PruningConfig, prune, quality_histogram


def _scores(values):
    return pd.DataFrame({"id": [f"d{i}" for i in range(len(values))], "quality": values})


def test_threshold_drops_below_four_and_counts_nan():
    keep, report = prune(_scores([0.5, 3.99, 4.0, 12.0, np.nan, 7.5]), PruningConfig())
    assert keep.tolist() == [False, False, True, True, False, True]
    assert (report["kept"], report["dropped_low_quality"], report["dropped_nan_quality"]) == (3, 2, 1)
    assert report["kept"] + report["dropped_low_quality"] + report["dropped_nan_quality"] == report["docs_in"]


def test_bottom_pct_drops_exactly_floor_share_with_stable_ties():
    values = [5.0, 1.0, 5.0, 5.0, 2.0, 9.0, 5.0, 3.0, 5.0, 8.0]
    keep, report = prune(_scores(values), PruningConfig(mode="bottom_pct", bottom_pct=45.0))
    assert report["dropped_low_quality"] == 4  # floor(10 * 0.45)
    # 1, 2, 3 and the first of the tied 5.0s (row 0) go.
    assert np.flatnonzero(~keep).tolist() == [0, 1, 4, 7]
    assert report["cut_quality"] == 5.0


def test_nan_policy_error_and_bad_config():
    with pytest.raises(ValueError, match="no finite"):
        prune(_scores([1.0, np.nan]), PruningConfig(nan_policy="error"))
    with pytest.raises(ValueError, match="mode=.top.: must be one of"):
        PruningConfig(mode="top")
    with pytest.raises(KeyError, match="quality"):
        prune(pd.DataFrame({"q": [1.0]}), PruningConfig())


def test_histogram_before_and_after():
    quality = np.array([0.2, 3.7, 4.0, 4.9, 15.0, np.nan])
    keep, _ = prune(_scores(quality), PruningConfig())
    table = quality_histogram(quality, keep)
    assert table["docs_before"].tolist()[:5] == [1, 0, 0, 1, 2] and table["docs_before"].iloc[15] == 1
    assert table["docs_after"].sum() == 3 and table.loc[table["score"] < 4, "docs_after"].sum() == 0
    assert abs(table["share_before"].sum() - 1) < 1e-12


# --- edge cases with hand-computed results (issue #28: mutation testing) ---


def test_bottom_pct_cut_inside_distinct_scores():
    # sorted: 1 2 3 4 6 7 8 9 10 11 (rows 3 8 0 6 9 1 4 2 7 5); 30% of 10 = 3 dropped: 1, 2, 3
    values = [3.0, 7.0, 9.0, 1.0, 8.0, 11.0, 4.0, 10.0, 2.0, 6.0]
    keep, report = prune(_scores(values), PruningConfig(mode="bottom_pct", bottom_pct=30.0))
    assert np.flatnonzero(~keep).tolist() == [0, 3, 8]
    assert report["cut_quality"] == 4.0  # the lowest kept score
    assert report["quality_mean_after"] == (7 + 9 + 8 + 11 + 4 + 10 + 6) / 7
    assert report["quality_mean_before"] == 6.1
    assert report["kept_share"] == 0.7


def test_bottom_pct_zero_drops_nothing_and_a_hundred_is_refused():
    keep, report = prune(_scores([3.0, 1.0, 2.0]), PruningConfig(mode="bottom_pct", bottom_pct=0.0))
    assert keep.all() and report["cut_quality"] == 1.0 and report["dropped_low_quality"] == 0
    with pytest.raises(ValueError, match=r"bottom_pct=100.0: must be in \[0, 100\)"):
        PruningConfig(mode="bottom_pct", bottom_pct=100.0)
    PruningConfig(mode="bottom_pct", bottom_pct=99.9)


@pytest.mark.parametrize("kwargs, message", [
    ({"threshold": float("nan")}, "threshold=nan: must be a finite number"),
    ({"threshold": float("inf")}, "threshold=inf: must be a finite number"),
    ({"bottom_pct": -1.0}, r"bottom_pct=-1.0: must be in \[0, 100\)"),
    ({"nan_policy": "keep"}, "nan_policy='keep': must be one of 'drop', 'error'"),
])
def test_config_errors_name_the_key_the_value_and_the_rule(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PruningConfig(**kwargs)


@pytest.mark.parametrize("mode", ["threshold", "bottom_pct"])
def test_no_scored_document_gives_an_empty_report_not_an_error(mode):
    import warnings

    config = PruningConfig(mode=mode)
    for values in ([], [np.nan, np.nan]):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "mean of empty slice": the empty cases are handled, not averaged
            keep, report = prune(_scores(values), config)
        assert not keep.any()
        assert report["kept"] == 0 and report["dropped_low_quality"] == 0
        assert report["dropped_nan_quality"] == len(values)
        assert report["kept_share"] == 0.0
        assert np.isnan(report["quality_mean_before"]) and np.isnan(report["quality_mean_after"])
        if mode == "threshold":
            assert report["cut_quality"] == 4.0
        else:
            assert np.isnan(report["cut_quality"])


def test_everything_dropped_has_no_mean_after():
    keep, report = prune(_scores([1.0, 2.0]), PruningConfig())
    assert not keep.any() and report["dropped_low_quality"] == 2
    assert report["quality_mean_before"] == 1.5 and np.isnan(report["quality_mean_after"])


def test_infinite_scores_are_unscored_in_every_count():
    # +inf passes `q >= 4` but is not a finite score: dropped and counted like NaN; the means are over
    # finite scores (prune_shards sums finite scores only; the two must agree)
    keep, report = prune(_scores([np.inf, 5.0, 3.0, -np.inf, 7.0]), PruningConfig())
    assert keep.tolist() == [False, True, False, False, True]
    assert (report["kept"], report["dropped_low_quality"], report["dropped_nan_quality"]) == (2, 1, 2)
    assert report["quality_mean_before"] == 5.0 and report["quality_mean_after"] == 6.0


def test_an_object_column_with_missing_scores_is_read_as_floats():
    # e.g. records from JSON with nulls: None is an unscored document, not a crash
    scores = pd.DataFrame({"id": ["a", "b", "c"], "quality": pd.Series([5.0, None, 2.0], dtype=object)})
    keep, report = prune(scores, PruningConfig())
    assert keep.tolist() == [True, False, False]
    assert (report["dropped_low_quality"], report["dropped_nan_quality"]) == (1, 1)
    assert quality_histogram(scores["quality"].to_numpy())["docs_before"].tolist()[:6] == [0, 0, 1, 0, 0, 1]


def test_an_object_column_holding_a_string_or_a_boolean_is_refused_in_one_line():
    from curation.configuration import ConfigError

    for odd in ("7", True):
        scores = pd.DataFrame({"id": ["a", "b", "c"], "quality": pd.Series([5.0, None, odd], dtype=object)})
        with pytest.raises(ConfigError, match=r"^pruning\.score_column='quality': the scores' column 'quality' holds "
                                              r"object values, not numbers"):
            prune(scores, PruningConfig())


def test_histogram_clips_to_the_scale_and_bins_kept_low_scores():
    quality = np.array([-0.5, 0.5, 1.0, 15.2, 17.0])
    table = quality_histogram(quality, np.ones(5, dtype=bool))
    expected = [2, 1] + [0] * 13 + [2]  # -0.5 -> 0, 17 -> 15
    assert table["docs_before"].tolist() == expected and table["docs_after"].tolist() == expected
    assert len(table) == 16


def test_histogram_shares_of_a_single_document():
    table = quality_histogram(np.array([6.5]), np.array([True]))
    assert table["share_before"].tolist() == [0.0] * 6 + [1.0] + [0.0] * 9
    assert table["share_after"].tolist() == table["share_before"].tolist()


def test_histogram_from_counts_keeps_integer_counts_and_shares():
    from curation.pruning import histogram_from_counts

    before = np.zeros(16)
    before[6] = 1.0  # float counts (e.g. summed from JSON) come back as integer counts
    table = histogram_from_counts(before, before.copy())
    assert table["docs_before"].dtype == np.int64 and table["docs_after"].dtype == np.int64
    assert table["share_before"].iloc[6] == 1.0 and table["share_after"].iloc[6] == 1.0
    assert table["share_before"].sum() == 1.0
