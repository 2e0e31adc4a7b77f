"""SemDeDup (Abbas et al. 2023) as in the FAIR code, aimed at an exact budget.

1. k-means (scikit-learn) on the unit-normalised embeddings;
2. inside each cluster, order the items by the keep rule (FAIR ``which_to_keep``):
   ``hard`` = farthest from the centroid first (FAIR default), ``easy`` = closest
   first, ``random``, or ``quality`` = highest quality first;
3. for each item j, M_j = max cosine similarity to any item *before* it in that
   order (FAIR: max over the upper triangle of the cluster's similarity matrix,
   column-wise); FAIR drops j when M_j > 1 - eps.

Hitting the budget: the survivors of threshold eps are exactly {j : M_j <= 1 - eps},
a threshold on one number per item. So with ``eps=None`` the `budget` items of
smallest M survive -- the exact eps a binary search would converge to -- and
items tied at the cut are ranked by quality (higher kept), then index. With a
fixed ``eps`` the survivor count is trimmed (most duplicated or lowest quality
first) or topped up (least duplicated or highest quality first) per ``adjust``.
``info`` reports the effective eps and how many items were trimmed/topped up/tie-broken.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans

from curation.selection.config import SemDeDupConfig
from curation.selection.seeds import derive_seed


_COLUMNS = 2048


def _normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def max_earlier_similarity(unit: np.ndarray, labels: np.ndarray, order_key: np.ndarray) -> np.ndarray:
    """M_j = max cos(z_i, z_j) over items i of j's cluster that come before j by ascending `order_key`.

    The first item of a cluster (and a singleton cluster) gets -inf: it always survives.
    """
    m = np.full(len(unit), -np.inf)
    for c in np.unique(labels):
        members = np.nonzero(labels == c)[0]
        members = members[np.argsort(order_key[members], kind="stable")]  # keep order
        x = unit[members].astype(np.float32)
        for a in range(1, len(members), _COLUMNS):  # column blocks bound memory to |cluster| x _COLUMNS
            cols = np.arange(a, min(a + _COLUMNS, len(members)))
            sims = x[: cols[-1]] @ x[cols].T  # (rows before the last column, block)
            sims[np.arange(cols[-1])[:, None] >= cols[None, :]] = -np.inf  # only i < j counts
            m[members[cols]] = sims.max(0)
    return m


def select_semdedup(
    embeddings: np.ndarray, quality: np.ndarray, budget: int, cfg: SemDeDupConfig, *, seed: int = 0
) -> tuple[np.ndarray, dict]:
    """SemDeDup keeping exactly `budget` items; returns (sorted ids, info)."""
    n = len(embeddings)
    unit = _normalize(np.asarray(embeddings, dtype=np.float64))
    q = np.asarray(quality, dtype=np.float64)
    k = min(cfg.n_clusters, n)
    km = KMeans(n_clusters=k, n_init=cfg.kmeans_n_init, max_iter=cfg.kmeans_max_iter, random_state=derive_seed(seed, 40) % (2**31))
    labels = km.fit_predict(unit)
    centroids = _normalize(km.cluster_centers_)
    dist_to_centroid = 1.0 - np.einsum("nd,nd->n", unit, centroids[labels])  # cosine distance (FAIR, non-spherical)

    # ascending order_key = the order in which items are kept within a cluster
    if cfg.keep == "hard":
        order_key = -dist_to_centroid
    elif cfg.keep == "easy":
        order_key = dist_to_centroid
    elif cfg.keep == "quality":
        order_key = -q
    else:  # random
        order_key = np.random.default_rng(derive_seed(seed, 41)).random(n)
    m = max_earlier_similarity(unit, labels, order_key)

    info: dict = {"n_clusters": k, "trimmed": 0, "topped_up": 0, "tie_broken": 0}
    # rank by duplication (M ascending); among equal M, higher quality, then lower index
    by_duplication = np.lexsort((np.arange(n), -q, m))
    if cfg.eps is None:
        keep = by_duplication[:budget]
        cut = m[keep[-1]]
        info["tie_broken"] = int((m[by_duplication[budget:]] == cut).sum())
        info["eps_effective"] = float(1.0 - cut) if np.isfinite(cut) else None
        info["survivors_at_eps"] = budget
    else:
        survivors = np.nonzero(m <= 1.0 - cfg.eps)[0]
        info["eps_effective"] = cfg.eps
        info["survivors_at_eps"] = int(len(survivors))
        preference = by_duplication if cfg.adjust == "similarity" else np.lexsort((np.arange(n), -q))
        rank = np.empty(n, dtype=np.int64)
        rank[preference] = np.arange(n)
        if len(survivors) >= budget:  # trim the worst-ranked survivors
            keep = survivors[np.argsort(rank[survivors], kind="stable")[:budget]]
            info["trimmed"] = int(len(survivors) - budget)
        else:  # top up with the best-ranked dropped items
            dropped = np.setdiff1d(np.arange(n), survivors)
            extra = dropped[np.argsort(rank[dropped], kind="stable")[: budget - len(survivors)]]
            keep = np.concatenate([survivors, extra])
            info["topped_up"] = int(len(extra))
    info["dropped"] = int(n - budget)
    return np.sort(keep).astype(np.int64), info
