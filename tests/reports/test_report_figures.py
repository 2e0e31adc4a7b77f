"""What the report figures show (issue #53): integer counts on an integer colour bar; the paper's numbers beside
ours where a report has them; the number of documents a report covers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from curation.reporting.plots import plot_quality_diversity_heatmap


def test_selection_clusters_colour_bar_counts_in_whole_numbers():
    rng = np.random.default_rng(0)
    clusters = pd.DataFrame({"quality_mean": rng.uniform(4, 12, 30), "diversity": rng.uniform(0.2, 0.8, 30),
                             "size": rng.integers(5, 40, 30), "selected_share": rng.uniform(0, 1, 30)})
    fig = plot_quality_diversity_heatmap(clusters)
    bar = next(ax for ax in fig.axes if ax.get_ylabel() == "clusters")  # the count panel's colour bar
    ticks = [t for t in bar.get_yticks() if bar.get_ylim()[0] <= t <= bar.get_ylim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    counts, _, _ = np.histogram2d(clusters["quality_mean"], clusters["diversity"], bins=12)
    assert max(ticks) <= counts.max() and bar.get_ylim()[1] == counts.max() + 0.5  # one colour per count
