"""Quality-only and random baselines."""

from __future__ import annotations

import numpy as np

from curation.selection.seeds import derive_seed


def select_topk_quality(quality: np.ndarray, budget: int) -> np.ndarray:
    """The `budget` items of highest quality (Eq. 3 maximised exactly); ties to the lower index."""
    return np.sort(np.argsort(-np.asarray(quality, dtype=np.float64), kind="stable")[:budget]).astype(np.int64)


def select_random(n: int, budget: int, seed: int) -> np.ndarray:
    """A uniform random subset of `budget` of `n` items."""
    rng = np.random.default_rng(derive_seed(seed, 30))
    return np.sort(rng.choice(n, size=budget, replace=False)).astype(np.int64)
