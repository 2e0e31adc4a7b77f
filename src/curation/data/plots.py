"""Pictures of the document statistics (matplotlib, headless)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def plot_document_stats(doc_stats: pd.DataFrame, max_sources: int = 12):
    """Left: source mix (documents per source). Right: characters per document by source (log bins)."""
    counts = doc_stats["source"].value_counts()
    top = list(counts.index[:max_sources])
    fig, (ax_mix, ax_len) = plt.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)
    ax_mix.barh(top[::-1], counts[top].to_numpy()[::-1], color="tab:blue")
    ax_mix.set_xlabel("documents")
    ax_mix.set_title(f"source mix ({len(doc_stats):,} documents, top {len(top)} sources)")
    lengths = doc_stats["n_chars"].clip(lower=1)
    bins = np.logspace(np.log10(lengths.min()), np.log10(lengths.max() + 1), 40)
    for source in top[:6]:
        ax_len.hist(lengths[doc_stats["source"] == source], bins=bins, histtype="step", label=source)
    ax_len.set_xscale("log")
    ax_len.set_xlabel("characters per document")
    ax_len.set_ylabel("documents")
    ax_len.set_title("length distribution (6 largest sources)")
    ax_len.legend(fontsize=7)
    return fig
