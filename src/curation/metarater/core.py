"""The numeric parts of Meta-rater: weights, aggregation, regression, search."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from curation.selection.corpus import top_fraction


def dirichlet_weights(n: int, m: int, *, alpha: float = 1.0, seed: int = 0) -> np.ndarray:
    """``n`` weight vectors over ``m`` raters from a symmetric Dirichlet(alpha) (Alg. 1 step 1).

    Each row sums to 1. alpha = 1 is uniform over the simplex.
    """
    if n < 1 or m < 1:
        raise ValueError(f"need n >= 1 and m >= 1, got n={n}, m={m}")
    if alpha <= 0:
        raise ValueError(f"metarater.alpha must be > 0, got {alpha}")
    return np.random.default_rng(seed).dirichlet(np.full(m, float(alpha)), size=n)


def minmax_scale(scores: np.ndarray, lo: float = 0.0, hi: float = 5.0) -> np.ndarray:
    """Scale each rater column to [lo, hi] so weights compare raters on one scale (Sec. 3.2).

    A constant column maps to ``lo``. NaN scores are rejected: the caller must
    have counted and handled them.
    """
    scores = np.asarray(scores, dtype="float64")
    if scores.ndim != 2:
        raise ValueError(f"scores must be (documents, raters), got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("scores contain NaN or inf; fill or drop them before Meta-rater")
    low, high = scores.min(axis=0), scores.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    return lo + (scores - low) / span * (hi - lo)


def aggregate(scaled: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Q_agg(x) = sum_j w_j Q_j(x) (Alg. 1 step 2). ``weights`` may be (m,) or (k, m)."""
    return np.asarray(scaled) @ np.asarray(weights).T


# Alg. 1 step 3, the top keep_frac by Q_agg: the project's one top-share pick.
select_top = top_fraction


@dataclass
class RegressionConfig:
    """LightGBM settings of the official Meta-rater/RegMix regression script.

    One change: early stopping uses its own split (``early_stop_frac``), and
    the reported Spearman rho comes from a test split the model never saw
    (the official script early-stops on its test split, which flatters it).

    ``model="ridge"`` replaces LightGBM with a cross-validated ridge regression
    on the same train + early-stop rows (RegMix's linear baseline): with tens of
    proxies it can rank weight vectors better than trees early-stopped on a
    dozen rows (measured on the bundled corpus, REPRODUCING.md).
    """

    model: str = "lightgbm"  # lightgbm (the paper's) | ridge
    n_estimators: int = 1000
    learning_rate: float = 0.01
    boosting_type: str = "gbdt"
    objective: str = "regression"
    min_child_samples: int = 20  # LightGBM default; the quick config lowers it for N=32
    num_leaves: int = 31
    early_stopping_rounds: int = 3
    test_frac: float = 0.2
    early_stop_frac: float = 0.2
    seed: int = 42
    n_jobs: int = 1  # hundreds of rows: threads cost more than they save
    extra: dict[str, Any] = field(default_factory=dict)  # any other LGBMRegressor argument


def fit_regressor(weights: np.ndarray, losses: np.ndarray, config: RegressionConfig) -> tuple[Any, dict[str, float]]:
    """Fit ``f(w) -> loss`` (Sec. 3.2 "Model Fitting"); return the model and split metrics.

    Metrics: ``spearman_test`` (rho of predicted vs true loss on the held-out
    test split), ``mae_test``, ``mae_test_constant`` (a constant predictor, the
    train mean, for comparison), split sizes and the best iteration.
    """
    import lightgbm as lgb

    weights = np.asarray(weights, dtype="float64")
    losses = np.asarray(losses, dtype="float64")
    n = len(losses)
    if weights.shape[0] != n:
        raise ValueError(f"{weights.shape[0]} weight vectors but {n} losses")
    n_test = max(1, int(round(n * config.test_frac)))
    n_stop = max(1, int(round(n * config.early_stop_frac)))
    if n - n_test - n_stop < 2:
        raise ValueError(f"{n} proxies are too few for train/early-stop/test splits of "
                         f"{config.test_frac}/{config.early_stop_frac}")
    order = np.random.default_rng(config.seed).permutation(n)
    test, stop, train = order[:n_test], order[n_test:n_test + n_stop], order[n_test + n_stop:]
    if config.model == "ridge":
        from sklearn.linear_model import RidgeCV

        fit_rows = np.concatenate([train, stop])  # no early stopping: the ridge uses both splits
        model = RidgeCV(alphas=np.logspace(-5, 2, 29)).fit(weights[fit_rows], losses[fit_rows])
        return model, _split_metrics(model, weights, losses, train=fit_rows, stop=stop, test=test,
                                     best_iteration=float("nan"))
    if config.model != "lightgbm":
        raise ValueError(f"config key 'metarater.regression.model': {config.model!r} is not lightgbm or ridge")
    model = lgb.LGBMRegressor(
        boosting_type=config.boosting_type, objective=config.objective, n_estimators=config.n_estimators,
        learning_rate=config.learning_rate, min_child_samples=config.min_child_samples,
        num_leaves=config.num_leaves, random_state=config.seed, n_jobs=config.n_jobs, verbose=-1, **config.extra,
    )
    model.fit(weights[train], losses[train], eval_X=(weights[stop],), eval_y=(losses[stop],), eval_metric="l2",
              callbacks=[lgb.early_stopping(config.early_stopping_rounds, verbose=False)])
    return model, _split_metrics(model, weights, losses, train=train, stop=stop, test=test,
                                 best_iteration=float(model.best_iteration_ or config.n_estimators))


def _split_metrics(model: Any, weights: np.ndarray, losses: np.ndarray, *, train: np.ndarray, stop: np.ndarray,
                   test: np.ndarray, best_iteration: float) -> dict[str, float]:
    predicted = model.predict(weights[test])
    # A constant prediction has no rank order: rho is undefined (NaN), not 0.
    rho = spearmanr(predicted, losses[test]).statistic if len(test) > 2 and np.ptp(predicted) > 0 else float("nan")
    return {
        "spearman_test": float(rho),
        "mae_test": float(np.abs(predicted - losses[test]).mean()),
        "mae_test_constant": float(np.abs(losses[train].mean() - losses[test]).mean()),
        "n_train": float(len(train)),
        "n_early_stop": float(len(stop)),
        "n_test": float(len(test)),
        "best_iteration": best_iteration,
    }


def search_weights(model: Any, m: int, *, n_candidates: int = 200_000, top_k: int = 128, alpha: float = 1.0,
                   seed: int = 1, batch: int = 100_000) -> tuple[np.ndarray, pd.DataFrame]:
    """w* = mean of the ``top_k`` candidates with the lowest predicted loss (Sec. 3.2 "Optimal Weight Prediction").

    Candidates are a dense Dirichlet sample, predicted in batches so 1M
    candidates need no more memory than ``batch`` of them. Returns w* (sums
    to 1) and the top candidates with their predicted losses.
    """
    rng = np.random.default_rng(seed)
    best_w = np.empty((0, m))
    best_l = np.empty(0)
    for start in range(0, n_candidates, batch):
        cand = rng.dirichlet(np.full(m, float(alpha)), size=min(batch, n_candidates - start))
        pred = model.predict(cand)
        pool_w = np.vstack([best_w, cand])
        pool_l = np.concatenate([best_l, pred])
        keep = np.argsort(pool_l, kind="stable")[:top_k]
        best_w, best_l = pool_w[keep], pool_l[keep]
    w_star = best_w.mean(axis=0)
    w_star = w_star / w_star.sum()
    top = pd.DataFrame(best_w, columns=[f"w{j}" for j in range(m)])
    top.insert(0, "predicted_loss", best_l)
    return w_star, top
