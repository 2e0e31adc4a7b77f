"""Diagnostics of a Meta-rater sweep: weight-space PCA (Fig. 5) and a cross-validated Spearman rho.

With N = 32 proxies the held-out test split of :func:`fit_regressor` has ~6
points, so its rho moves in large steps; :func:`cross_validated_spearman`
predicts every proxy once from a model that never saw it (K folds, each
model early-stopping on its own split of the training part) and reports the
rho of all N out-of-fold predictions alongside it.

No Kedro, MLflow or Hydra imports.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from curation.metarater.core import RegressionConfig, fit_regressor


def weight_pca(weights: np.ndarray, n_components: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Project weight vectors on their first principal components (SVD of the centred matrix).

    Returns (coordinates (N, c), components (c, m), mean (m,), explained variance ratio (c,)).
    Project other vectors (w*, uniform) with ``(w - mean) @ components.T``.
    """
    weights = np.asarray(weights, dtype="float64")
    mean = weights.mean(axis=0)
    centred = weights - mean
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    c = min(n_components, vt.shape[0])
    variance = s**2
    ratio = variance[:c] / variance.sum() if variance.sum() > 0 else np.zeros(c)
    return centred @ vt[:c].T, vt[:c], mean, ratio


def cross_validated_spearman(weights: np.ndarray, losses: np.ndarray, config: RegressionConfig,
                             folds: int = 5) -> tuple[float, np.ndarray]:
    """Spearman rho of out-of-fold predictions over all proxies, and the predictions.

    Fold f's model is fit by :func:`fit_regressor` on the other folds (which
    holds out its own early-stopping and test splits), so no prediction comes
    from a model that saw the proxy, directly or through early stopping.
    """
    weights = np.asarray(weights, dtype="float64")
    losses = np.asarray(losses, dtype="float64")
    n = len(losses)
    folds = min(folds, n)
    order = np.random.default_rng(config.seed).permutation(n)
    predicted = np.empty(n)
    for f in range(folds):
        held = order[f::folds]
        rest = np.setdiff1d(order, held)
        model, _ = fit_regressor(weights[rest], losses[rest], config)
        predicted[held] = model.predict(weights[held])
    rho = spearmanr(predicted, losses).statistic if n > 2 else float("nan")
    return float(rho), predicted
