"""Figures of a selection: objective trajectory (DATAMASK Fig. 3), embedding map
(Fig. 2 analogue) and the cluster quality x diversity heatmap (Fig. 5 analogue)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def plot_objective_trajectory(history: pd.DataFrame, title: str = "selection objective"):
    """Joint objective and each term against the step, one panel each (their scales differ:
    the joint may be standardised, the terms are raw); entropy of softmax(L) beside the joint."""
    terms = [c for c in ("joint", "quality", "diversity") if c in history]
    if history.empty or "step" not in history or not terms:
        fig, ax = plt.subplots(figsize=(7, 3), constrained_layout=True)
        ax.text(0.5, 0.5, "this method records no trajectory", ha="center", va="center")
        ax.set_axis_off()
        return fig
    fig, axes = plt.subplots(len(terms), 1, figsize=(7, 2.2 * len(terms) + 0.6), sharex=True,
                             constrained_layout=True, squeeze=False)
    for ax, column in zip(axes[:, 0], terms):
        ax.plot(history["step"], history[column], color={"joint": "tab:blue", "quality": "tab:orange",
                                                          "diversity": "tab:green"}[column])
        ax.set_ylabel(column)
        ax.grid(alpha=0.3)
    if "entropy" in history:
        twin = axes[0, 0].twinx()
        twin.plot(history["step"], history["entropy"], color="grey", alpha=0.5)
        twin.set_ylabel("entropy of softmax(L)", color="grey", fontsize=8)
    axes[-1, 0].set_xlabel("step")
    axes[0, 0].set_title(title)
    return fig


def _pca2(x: np.ndarray) -> np.ndarray:
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:2].T


def plot_selection_map(embeddings: np.ndarray, quality: np.ndarray, indices: np.ndarray, *,
                       max_points: int = 6000, seed: int = 0, title: str = "selection on the embedding map"):
    """2-D PCA of the embeddings: all documents by quality, the selected ones ringed (Fig. 2 analogue).

    PCA rather than the paper's t-SNE: deterministic and seconds instead of
    minutes on CPU; the picture answers the same question (does the selection
    cover the space or huddle in the high-quality corner?).
    """
    rng = np.random.default_rng(seed)
    n = len(quality)
    shown = np.sort(rng.choice(n, size=min(n, max_points), replace=False))
    xy = _pca2(np.asarray(embeddings[shown], dtype="float64"))
    selected = np.isin(shown, indices)
    fig, ax = plt.subplots(figsize=(6.5, 5.5), constrained_layout=True)
    points = ax.scatter(xy[:, 0], xy[:, 1], c=np.asarray(quality)[shown], s=4, cmap="viridis", alpha=0.5)
    ax.scatter(xy[selected, 0], xy[selected, 1], s=14, facecolors="none", edgecolors="crimson", linewidths=0.6,
               label=f"selected ({int(selected.sum())} of {len(shown)} shown)")
    fig.colorbar(points, ax=ax, label="quality")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title)
    return fig


def cluster_quality_diversity(embeddings: np.ndarray, quality: np.ndarray, indices: np.ndarray, *,
                              n_clusters: int = 50, seed: int = 0) -> pd.DataFrame:
    """Per k-means cluster: size, mean quality, diversity and the share selected.

    Diversity of a cluster = 1 - mean pairwise cosine similarity of its
    members (computed as 1 - ||sum z||^2 / n^2 on unit vectors), so a cluster
    of near-duplicates scores near 0.
    """
    from sklearn.cluster import MiniBatchKMeans

    emb = np.asarray(embeddings, dtype="float32")
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    k = int(min(n_clusters, max(2, len(emb) // 20)))
    labels = MiniBatchKMeans(n_clusters=k, random_state=seed, n_init=3, batch_size=2048).fit_predict(emb)
    chosen = np.zeros(len(emb), dtype=bool)
    chosen[np.asarray(indices)] = True
    rows = []
    for c in range(k):
        members = labels == c
        size = int(members.sum())
        if size == 0:
            continue
        total = emb[members].sum(axis=0)
        rows.append({"cluster": c, "size": size, "quality_mean": float(np.asarray(quality)[members].mean()),
                     "diversity": float(1.0 - (total @ total) / size**2), "selected_share": float(chosen[members].mean())})
    return pd.DataFrame(rows)


def plot_quality_diversity_heatmap(clusters: pd.DataFrame, title: str = "clusters: quality x diversity"):
    """Left: how many clusters fall in each (quality, diversity) cell (Fig. 5), one colour per count and whole
    numbers on its colour bar. Right: share selected per cluster."""
    from matplotlib.colors import BoundaryNorm
    from matplotlib.ticker import MaxNLocator

    fig, (ax_h, ax_s) = plt.subplots(1, 2, figsize=(11, 4.5), constrained_layout=True)
    counts, _, _ = np.histogram2d(clusters["quality_mean"], clusters["diversity"], bins=12)
    top = max(int(counts.max()), 1)
    cmap = plt.get_cmap("Blues", top + 1)  # counts 0..top: a colour each, the bar's bounds halfway between
    hist = ax_h.hist2d(clusters["quality_mean"], clusters["diversity"], bins=12, cmap=cmap,
                       norm=BoundaryNorm(np.arange(-0.5, top + 1.5), cmap.N))
    fig.colorbar(hist[3], ax=ax_h, label="clusters", ticks=MaxNLocator(integer=True))
    ax_h.set_xlabel("cluster mean quality")
    ax_h.set_ylabel("cluster diversity (1 - mean cosine)")
    ax_h.set_title(title)
    points = ax_s.scatter(clusters["quality_mean"], clusters["diversity"], s=10 + 200 * clusters["size"]
                          / clusters["size"].max(), c=clusters["selected_share"], cmap="Reds", vmin=0,
                          edgecolors="k", linewidths=0.3)
    fig.colorbar(points, ax=ax_s, label="share of the cluster selected")
    ax_s.set_xlabel("cluster mean quality")
    ax_s.set_ylabel("cluster diversity")
    ax_s.set_title("what the selection keeps (marker size = cluster size)")
    return fig


def plot_quality_histogram(table: pd.DataFrame, title: str = "quality distribution"):
    """Documents per integer quality score, before and (if present) after pruning (Table 6 analogue)."""
    fig, ax = plt.subplots(figsize=(7, 3.8), constrained_layout=True)
    width = 0.4 if "docs_after" in table else 0.8
    ax.bar(table["score"] - (width / 2 if "docs_after" in table else 0), table["docs_before"], width=width,
           label="before pruning" if "docs_after" in table else "documents")
    if "docs_after" in table:
        ax.bar(table["score"] + width / 2, table["docs_after"], width=width, label="after pruning")
    ax.set_xlabel("quality score (0-15, floor)")
    ax.set_ylabel("documents")
    ax.set_xticks(table["score"])
    ax.legend(fontsize=8)
    ax.set_title(title)
    return fig


def plot_spearman_heatmap(scores: pd.DataFrame, title: str = "Spearman correlation among raters"):
    """Rank correlation of every pair of score columns (Meta-rater Fig. 4 analogue)."""
    numeric = scores.select_dtypes("number")
    corr = numeric.corr(method="spearman")
    size = max(6.0, 0.42 * len(corr) + 2)
    fig, ax = plt.subplots(figsize=(size + 1.5, size), constrained_layout=True)
    image = ax.imshow(corr.to_numpy(), vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(corr)), corr.columns, rotation=90, fontsize=7)
    ax.set_yticks(range(len(corr)), corr.columns, fontsize=7)
    for i in range(len(corr)):
        for j in range(len(corr)):
            value = corr.iat[i, j]
            if np.isfinite(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=5,
                        color="white" if abs(value) > 0.6 else "black")
    fig.colorbar(image, ax=ax, shrink=0.8, label="Spearman rho")
    ax.set_title(title)
    return fig


def plot_length_distribution(lengths: np.ndarray, sources: np.ndarray, max_sources: int = 8,
                             unit: str = "tokens", title: str = "document length per source"):
    """Box plot of document lengths per source (largest sources first)."""
    frame = pd.DataFrame({"length": np.asarray(lengths), "source": np.asarray(sources)})
    order = frame["source"].value_counts().index[:max_sources]
    fig, ax = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    ax.boxplot([frame.loc[frame["source"] == s, "length"] for s in order], showfliers=False)
    ax.set_xticks(range(1, len(order) + 1), order, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(f"{unit} per document")
    ax.set_title(title)
    return fig


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


def plot_verification_deltas(candidates: pd.DataFrame, tasks: list[str]):
    """Per-task deltas of each annealed candidate against the default-only annealing (Ultra-FineWeb Table 8)."""
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(tasks), 3.6))
    width = 0.8 / max(len(candidates), 1)
    x = np.arange(len(tasks))
    for i, (_, row) in enumerate(candidates.iterrows()):
        ax.bar(x + i * width, [row[f"delta_{t}"] for t in tasks], width,
               label=f"{row['dataset']} ({row['ratio']:.0%})")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(x + width * (len(candidates) - 1) / 2, tasks, rotation=30, ha="right")
    ax.set_ylabel("delta vs default-only annealing (points)")
    ax.set_title("Efficient verification (Ultra-FineWeb Table 8 analogue)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
