"""Figures of a Meta-rater run (seeds/004): loss landscape over the weight PCA (Fig. 5 analogue),
validation loss against the number of proxies N (Fig. 2 analogue), the comparison of combining
strategies (Table 4 analogue) and the learned weights (Table 10 analogue)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _empty(message: str, figsize=(7, 3)):
    fig, ax = plt.subplots(figsize=figsize, constrained_layout=True)
    ax.text(0.5, 0.5, message, ha="center", va="center")
    ax.set_axis_off()
    return fig


def plot_loss_landscape(coords: np.ndarray, losses: np.ndarray, explained: np.ndarray,
                        marks: dict[str, np.ndarray] | None = None,
                        title: str = "proxy validation loss over the weight PCA (Meta-rater Fig. 5 analogue)"):
    """Proxy losses over the first two principal components of their weight vectors.

    coords: (N, 2) PCA coordinates of the proxies' weights; losses: (N,) their
    validation losses (nats/token); marks: other weight vectors projected the
    same way (e.g. ``{"w*": ..., "uniform": ...}``), drawn as labelled stars.
    The filled contours interpolate the proxies linearly (Delaunay), as the
    paper's landscape does; the dots are the measured proxies.
    """
    coords = np.asarray(coords, dtype="float64")
    losses = np.asarray(losses, dtype="float64")
    if len(losses) < 3 or coords.shape[1] < 2:
        return _empty("fewer than 3 proxies: no landscape")
    fig, ax = plt.subplots(figsize=(6.4, 5.2), constrained_layout=True)
    try:
        filled = ax.tricontourf(coords[:, 0], coords[:, 1], losses, levels=14, cmap="viridis_r", alpha=0.85)
    except (ValueError, RuntimeError):  # collinear points: no triangulation
        filled = None
    points = ax.scatter(coords[:, 0], coords[:, 1], c=losses, cmap="viridis_r", edgecolor="black", linewidth=0.5,
                        s=28, zorder=3)
    fig.colorbar(filled if filled is not None else points, ax=ax, label="validation loss (nats/token)")
    span = np.ptp(coords[:, :2], axis=0) * 0.06 + 1e-9  # room for the markers on the hull
    ax.set_xlim(coords[:, 0].min() - span[0], coords[:, 0].max() + span[0])
    ax.set_ylim(coords[:, 1].min() - span[1], coords[:, 1].max() + span[1])
    best = int(np.argmin(losses))
    ax.annotate(f"best proxy {losses[best]:.3f}", coords[best], textcoords="offset points", xytext=(6, 6),
                fontsize=8)
    for (name, xy), color in zip((marks or {}).items(), ("red", "white", "orange", "magenta")):
        ax.scatter([xy[0]], [xy[1]], marker="*", s=220, color=color, edgecolor="black", zorder=4, label=name)
    if marks:
        ax.legend(loc="best", fontsize=8)
    ax.set_xlabel(f"PC1 ({100 * explained[0]:.0f}% of weight variance)")
    ax.set_ylabel(f"PC2 ({100 * explained[1]:.0f}%)" if len(explained) > 1 else "PC2")
    ax.set_title(title, fontsize=10)
    return fig


def plot_num_proxies(curve: pd.DataFrame, references: pd.DataFrame | None = None,
                     title: str = "w* selection vs proxies used for the regression (Meta-rater Fig. 2 analogue)"):
    """Validation loss of the w*-selection against N (columns ``num_proxies``, ``val_loss_mean``,
    ``val_loss_std``); ``references`` (``method``, ``val_loss_mean``) are drawn as horizontal lines."""
    if curve.empty:
        return _empty("no point of the N curve (too few proxies)")
    fig, ax = plt.subplots(figsize=(6.4, 4.2), constrained_layout=True)
    ax.errorbar(curve["num_proxies"], curve["val_loss_mean"], yerr=curve["val_loss_std"], marker="o", capsize=3,
                color="tab:blue", label="Meta-rater w* (regression on N proxies)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(curve["num_proxies"].tolist(), [str(n) for n in curve["num_proxies"]])
    if references is not None:
        for (_, row), color in zip(references.iterrows(), ("tab:grey", "tab:orange", "tab:green", "tab:red")):
            ax.axhline(row["val_loss_mean"], linestyle="--", color=color, linewidth=1,
                       label=f"{row['method']} ({row['val_loss_mean']:.3f})")
    ax.set_xlabel("proxies used for the regression, N")
    ax.set_ylabel("proxy validation loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return fig


def plot_comparisons(summary: pd.DataFrame, title: str = "combining strategies (Meta-rater Table 4 analogue)",
                     paper: pd.DataFrame | None = None):
    """Mean validation loss per method with the seeds' standard deviation; lower is better. With ``paper``
    (``method``, ``average_accuracy``), the paper's downstream accuracies in a panel beside it."""
    if summary.empty:
        return _empty("no comparisons were run")
    summary = summary.sort_values("val_loss_mean", ascending=False)
    height = 0.32 * max(len(summary), 0 if paper is None else len(paper)) + 1.4
    if paper is None:
        fig, ax = plt.subplots(figsize=(7, height), constrained_layout=True)
    else:
        from curation.reporting.artefacts import paper_bars

        fig, (ax, theirs) = plt.subplots(1, 2, figsize=(12, height), constrained_layout=True)
        paper_bars(theirs, list(paper["method"].astype(str)), list(paper["average_accuracy"].astype(float)),
                   "average downstream accuracy (%), higher is better", "paper: 1.3B models (seeds/004 Table 4)")
        theirs.set_xlim(paper["average_accuracy"].min() - 2, paper["average_accuracy"].max() + 1)
    colors = ["tab:red" if m == "metarater" else "tab:blue" if not str(m).startswith("rater:") else "tab:grey"
              for m in summary["method"]]
    ax.barh(summary["method"].astype(str), summary["val_loss_mean"], xerr=summary["val_loss_std"], color=colors,
            capsize=2)
    low = (summary["val_loss_mean"] - summary["val_loss_std"]).min()
    high = (summary["val_loss_mean"] + summary["val_loss_std"]).max()
    pad = max(high - low, 1e-3) * 0.15
    ax.set_xlim(low - pad, high + pad)
    ax.set_xlabel("proxy validation loss (nats/token), mean ± std over seeds")
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    return fig


def plot_weights(table: pd.DataFrame, title: str = "learned rater weights w* (Meta-rater Table 10 analogue)",
                 paper: pd.Series | None = None):
    """Horizontal bars of ``weight_pct`` per ``rater``, the largest on top; the uniform share as a line. With
    ``paper`` (rater -> the paper's weight in %, NaN where the paper has no such rater), the paper's weights as
    markers on the same rows."""
    if table.empty:
        return _empty("no weights")
    table = table.sort_values("weight_pct")
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(table) + 1.2), constrained_layout=True)
    ax.barh(table["rater"], table["weight_pct"], color="tab:red", label="this run")
    ax.axvline(100.0 / len(table), color="black", linestyle="--", linewidth=1, label="uniform")
    if paper is not None:
        from curation.reporting.artefacts import PAPER_GID

        theirs = table["rater"].map(paper)
        shown = theirs.notna().to_numpy()
        ax.scatter(theirs[shown], table["rater"][shown], marker="D", color="black", zorder=3, gid=PAPER_GID,
                   label="paper (of its 25 raters)")
    ax.set_xlabel("weight (%)")
    ax.tick_params(axis="y", labelsize=8)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return fig
