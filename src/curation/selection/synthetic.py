"""Synthetic clustered unit vectors with near-duplicates, for tests and benchmarks.

Not data: a stand-in with the properties the selection methods react to --
clusters of different sizes around a shared direction (real sentence embeddings
all have positive cosine with each other), near-duplicate copies, and a quality
score that differs between clusters, so quality and diversity conflict as in
DATAMASK Fig. 5.
"""

from __future__ import annotations

import numpy as np


def clustered_unit_vectors(
    n: int,
    d: int,
    *,
    n_clusters: int = 10,
    spread: float = 0.5,
    shared: float = 1.0,
    duplicate_fraction: float = 0.1,
    duplicate_noise: float = 0.02,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(embeddings (n, d) float32 unit rows, quality (n,) in [0, 15], cluster labels (n,)).

    spread: within-cluster noise relative to the distance between centres;
    shared: weight of the common direction (0 = centres spread over the sphere);
    duplicate_fraction: share of rows that are noisy copies (duplicate_noise) of other rows.
    """
    rng = np.random.default_rng(seed)
    common = rng.normal(size=d)
    common /= np.linalg.norm(common)
    centres = rng.normal(size=(n_clusters, d)) / np.sqrt(d) + shared * common
    sizes = rng.dirichlet(np.full(n_clusters, 2.0))  # unequal cluster sizes
    labels = rng.choice(n_clusters, size=n, p=sizes)
    x = centres[labels] + spread * rng.normal(size=(n, d)) / np.sqrt(d)
    n_dup = int(duplicate_fraction * n)
    if n_dup:
        rows = rng.choice(n, size=n_dup, replace=False)
        sources = rng.choice(np.setdiff1d(np.arange(n), rows), size=n_dup)
        x[rows] = x[sources] + duplicate_noise * rng.normal(size=(n_dup, d)) / np.sqrt(d)
        labels[rows] = labels[sources]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cluster_quality = rng.uniform(3.0, 12.0, size=n_clusters)
    quality = np.clip(cluster_quality[labels] + rng.normal(scale=1.5, size=n), 0.0, 15.0)
    return x.astype(np.float32), quality, labels
