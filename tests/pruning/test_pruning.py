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
