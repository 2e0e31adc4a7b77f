from __future__ import annotations

import numpy as np
import pytest

from curation.metarater import (
    ProxySweep,
    RegressionConfig,
    aggregate,
    dirichlet_weights,
    fit_regressor,
    minmax_scale,
    search_weights,
    select_top,
)


def test_dirichlet_weights_sum_to_one_and_are_reproducible():
    w = dirichlet_weights(64, 7, alpha=1.0, seed=3)
    assert w.shape == (64, 7) and np.allclose(w.sum(axis=1), 1.0) and (w >= 0).all()
    assert np.array_equal(w, dirichlet_weights(64, 7, alpha=1.0, seed=3))
    assert not np.array_equal(w, dirichlet_weights(64, 7, alpha=1.0, seed=4))
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_weights(2, 2, alpha=0)


def test_aggregation_picks_what_a_hand_computation_picks():
    # 4 documents x 2 raters; rater 0 in [0, 10], rater 1 in [1, 3].
    scores = np.array([[0.0, 3.0], [10.0, 1.0], [5.0, 2.0], [10.0, 3.0]])
    scaled = minmax_scale(scores)  # -> [[0,5],[5,0],[2.5,2.5],[5,5]]
    assert np.allclose(scaled, [[0, 5], [5, 0], [2.5, 2.5], [5, 5]])
    q = aggregate(scaled, np.array([0.8, 0.2]))  # [1.0, 4.0, 2.5, 5.0]
    assert np.allclose(q, [1.0, 4.0, 2.5, 5.0])
    assert select_top(q, 0.5).tolist() == [1, 3]
    q_rater1 = aggregate(scaled, np.array([0.0, 1.0]))  # [5, 0, 2.5, 5]: tie between docs 0 and 3
    assert select_top(q_rater1, 0.5).tolist() == [0, 3]
    with pytest.raises(ValueError, match="NaN"):
        minmax_scale(np.array([[np.nan, 1.0]]))


def test_minmax_scale_to_another_range_and_a_constant_rater_by_hand():
    """Found by mutation testing: the [0, 5] default hid hi + lo for hi - lo, a constant column was untested."""
    scores = np.array([[0.0, 7.0], [10.0, 7.0], [5.0, 7.0]])  # rater 1 is constant
    assert np.allclose(minmax_scale(scores, lo=1.0, hi=3.0), [[1.0, 1.0], [3.0, 1.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match="shape"):
        minmax_scale(np.array([1.0, 2.0]))


class _Quadratic:
    """A known loss landscape with the `predict` of a fitted regressor."""

    def __init__(self, optimum):
        self.optimum = np.asarray(optimum)

    def predict(self, w):
        return 3.0 + ((np.asarray(w) - self.optimum) ** 2).sum(axis=1)


def test_search_keeps_the_true_top_k_of_real_candidates_and_is_seeded():
    model = _Quadratic([0.5, 0.3, 0.2])
    w_star, top = search_weights(model, 3, n_candidates=5000, top_k=16, batch=1200, seed=4)
    # every kept row is a real candidate (a weight vector) with its own predicted loss, lowest first
    assert list(top.columns) == ["predicted_loss", "w0", "w1", "w2"]  # search_optimal_weights renames by position
    weights = top[["w0", "w1", "w2"]].to_numpy()
    assert len(top) == 16 and np.allclose(weights.sum(axis=1), 1.0) and (weights >= 0).all()
    assert np.allclose(top["predicted_loss"], model.predict(weights)) and top["predicted_loss"].is_monotonic_increasing
    assert np.allclose(w_star, weights.mean(axis=0) / weights.mean(axis=0).sum())
    # the same candidates in one batch: the batched search keeps the same top 16
    one_batch, top_one = search_weights(model, 3, n_candidates=5000, top_k=16, batch=5000, seed=4)
    assert np.allclose(np.sort(top_one["predicted_loss"]), np.sort(top["predicted_loss"]))
    again, _ = search_weights(model, 3, n_candidates=5000, top_k=16, batch=1200, seed=4)
    other, _ = search_weights(model, 3, n_candidates=5000, top_k=16, batch=1200, seed=5)
    assert np.array_equal(again, w_star) and not np.array_equal(other, w_star)


def test_search_and_dirichlet_defaults_are_the_papers():
    """Meta-rater Sec. 3.2: 200k Dirichlet(1) candidates, w* = mean of the best 128 (seed 1); proxies' weights
    Dirichlet(1), seed 0. Called with the defaults, not read from the signature, so a changed default shows."""
    model = _Quadratic([0.5, 0.3, 0.2])
    w_star, top = search_weights(model, 3)
    explicit, _ = search_weights(model, 3, n_candidates=200_000, top_k=128, alpha=1.0, seed=1, batch=100_000)
    assert len(top) == 128 and np.array_equal(w_star, explicit)
    assert np.array_equal(dirichlet_weights(5, 3), dirichlet_weights(5, 3, alpha=1.0, seed=0))
    assert dirichlet_weights(1, 1).tolist() == [[1.0]]  # one proxy over one rater is allowed


def test_fit_regressor_splits_metrics_and_settings_by_hand():
    """protocol=separate_early_stop: the splits are the first n_test / next n_stop rows of a permutation
    seeded with config.seed; the metrics are recomputed here from those rows; the LightGBM and ridge
    settings reach the model."""
    from scipy.stats import spearmanr

    w = dirichlet_weights(40, 3, seed=2)
    losses = 3.0 + 4.0 * ((w - np.array([0.6, 0.3, 0.1])) ** 2).sum(axis=1)
    cfg = RegressionConfig(n_estimators=400, learning_rate=0.07, min_child_samples=3, num_leaves=7,
                           early_stopping_rounds=5, test_frac=0.25, early_stop_frac=0.2, seed=11,
                           extra={"min_data_in_bin": 2}, protocol="separate_early_stop")
    model, m = fit_regressor(w, losses, cfg)
    order = np.random.default_rng(11).permutation(40)
    test, train = order[:10], order[18:]
    assert (m["n_test"], m["n_early_stop"], m["n_train"]) == (10, 8, 22)
    predicted = model.predict(w[test])
    assert m["spearman_test"] == pytest.approx(spearmanr(predicted, losses[test]).statistic)
    assert m["mae_test"] == pytest.approx(np.abs(predicted - losses[test]).mean())
    assert m["mae_test_constant"] == pytest.approx(np.abs(losses[train].mean() - losses[test]).mean())
    params = model.get_params()
    assert {k: params[k] for k in ("boosting_type", "objective", "n_estimators", "learning_rate",
                                   "min_child_samples", "num_leaves", "random_state", "n_jobs", "min_data_in_bin")} \
        == {"boosting_type": "gbdt", "objective": "regression", "n_estimators": 400, "learning_rate": 0.07,
            "min_child_samples": 3, "num_leaves": 7, "random_state": 11, "n_jobs": 1, "min_data_in_bin": 2}
    # early stopping on its own split stopped well before 400 rounds, and the metric is that iteration
    assert 0 < model.best_iteration_ < 400 and m["best_iteration"] == model.best_iteration_

    ridge, rm = fit_regressor(w, losses, RegressionConfig(model="ridge", test_frac=0.25, early_stop_frac=0.2, seed=11,
                                                                 protocol="separate_early_stop"))
    assert np.allclose(ridge.alphas, np.logspace(-5, 2, 29)) and np.isnan(rm["best_iteration"])
    assert rm["n_train"] == 30  # train + early-stop rows: the ridge has no early stopping
    # smallest case: 4 proxies split 1 test / 1 early-stop / 2 train (the ridge fits on 3); a test split of 2
    # or fewer has no rank correlation
    _, tiny = fit_regressor(w[:4], losses[:4], RegressionConfig(model="ridge", test_frac=0.25, early_stop_frac=0.25,
                                                                  protocol="separate_early_stop"))
    assert (tiny["n_test"], tiny["n_early_stop"], tiny["n_train"]) == (1, 1, 3) and np.isnan(tiny["spearman_test"])
    _, two = fit_regressor(w[:8], losses[:8], RegressionConfig(model="ridge", test_frac=0.25, early_stop_frac=0.25,
                                                                  protocol="separate_early_stop"))
    assert two["n_test"] == 2 and np.isnan(two["spearman_test"])
    with pytest.raises(ValueError, match="5 weight vectors but 4 losses"):  # 5 rows of 3 raters
        fit_regressor(w[:5], losses[:4], cfg)


def _loss(w: np.ndarray, optimum: np.ndarray) -> np.ndarray:
    return 3.0 + 4.0 * ((w - optimum) ** 2).sum(axis=1)


def test_regressor_beats_constant_and_search_finds_the_optimum():
    optimum = np.array([0.6, 0.3, 0.1])
    w = dirichlet_weights(400, 3, seed=0)
    losses = _loss(w, optimum) + np.random.default_rng(1).normal(0, 0.01, len(w))
    model, metrics = fit_regressor(w, losses, RegressionConfig(n_estimators=300, learning_rate=0.05,
                                                                   early_stopping_rounds=20))
    assert metrics["mae_test"] < 0.5 * metrics["mae_test_constant"]
    assert metrics["spearman_test"] > 0.8
    # the official protocol: the last 20% both early-stop and test
    assert metrics["n_train"] + metrics["n_test"] == 400 and metrics["n_early_stop"] == metrics["n_test"] == 80
    w_star, top = search_weights(model, 3, n_candidates=20_000, top_k=128, batch=8_000)
    assert abs(w_star.sum() - 1) < 1e-9 and len(top) == 128
    assert np.abs(w_star - optimum).max() < 0.12


def test_ridge_option_ranks_a_linear_landscape_and_search_picks_its_best_rater():
    cost = np.array([0.9, 0.2, 0.5, 0.7])  # rater 1 lowers the loss most
    w = dirichlet_weights(64, 4, seed=0)
    losses = 3.0 + w @ cost + np.random.default_rng(1).normal(0, 0.01, len(w))
    model, metrics = fit_regressor(w, losses, RegressionConfig(model="ridge"))
    assert metrics["spearman_test"] > 0.9 and metrics["mae_test"] < 0.5 * metrics["mae_test_constant"]
    assert metrics["n_train"] == 64 - metrics["n_test"]  # the ridge fits on train + early-stop rows
    w_star, _ = search_weights(model, 4, n_candidates=20_000, top_k=128, batch=8_000)
    assert int(np.argmax(w_star)) == 1


def test_a_constant_prediction_has_no_spearman_rho():
    w = dirichlet_weights(40, 3, seed=0)
    # no leaf can hold 1,000 of 24 rows: every tree is a stump, the prediction is the mean
    _, metrics = fit_regressor(w, w[:, 0], RegressionConfig(min_child_samples=1000))
    assert np.isnan(metrics["spearman_test"])


def test_unknown_regression_model_names_the_key():
    with pytest.raises(ValueError, match="regression.model"):
        fit_regressor(np.ones((10, 2)) / 2, np.arange(10.0), RegressionConfig(model="xgboost"))


def test_too_few_proxies_is_a_clear_error():
    with pytest.raises(ValueError, match="too few"):
        fit_regressor(np.ones((3, 2)) / 2, np.ones(3), RegressionConfig(protocol="separate_early_stop"))
    with pytest.raises(ValueError, match="too few"):
        fit_regressor(np.ones((2, 2)) / 2, np.ones(2), RegressionConfig())


def test_sweep_resumes_and_isolates_failures(tmp_path):
    weights = dirichlet_weights(5, 2, seed=0)
    calls: list[int] = []

    def train(i, w):
        calls.append(i)
        if i == 2:
            raise RuntimeError("out of memory on proxy 2")
        if i == 4 and len(calls) < 6:
            raise KeyboardInterrupt  # the sweep is killed while proxy 4 trains
        return {"val_loss": float(w[0]), "tokens": 100}

    sweep = ProxySweep(tmp_path, weights)
    with pytest.raises(KeyboardInterrupt):
        sweep.run(train)
    assert calls == [0, 1, 2, 3, 4]
    results = sweep.run(train)  # resume: only proxy 4 trains again
    assert calls == [0, 1, 2, 3, 4, 4]
    assert [r.status for r in results] == ["ok", "ok", "failed", "ok", "ok"]
    assert "out of memory" in results[2].error
    w, losses, found = sweep.collect()
    assert len(found) == 5 and w.shape == (4, 2) and np.allclose(losses, w[:, 0])
    assert results[0].extra == {"tokens": 100}


class _Counting(_Quadratic):
    """The quadratic landscape, counting the candidate rows it is asked to predict."""

    def __init__(self, target):
        super().__init__(target)
        self.rows = 0

    def predict(self, w):
        self.rows += len(w)
        return super().predict(w)


def test_search_predicts_exactly_n_candidates_by_default_and_as_given():
    # Sec. 3.2's 200,000 candidates: not one more, not one less (a first batch starting at 1 would lose one)
    model = _Counting([0.5, 0.3, 0.2])
    search_weights(model, 3)
    assert model.rows == 200_000
    model = _Counting([0.5, 0.3, 0.2])
    search_weights(model, 3, n_candidates=250, batch=100, top_k=4)
    assert model.rows == 250


def test_dirichlet_weights_refuse_either_count_below_one():
    for n, m in ((0, 3), (3, 0), (0, 0)):
        with pytest.raises(ValueError, match=rf"^need n >= 1 and m >= 1, got n={n}, m={m}$"):
            dirichlet_weights(n, m)


def test_the_boosting_type_reaches_lightgbm():
    rng = np.random.default_rng(0)
    w = rng.dirichlet(np.ones(3), size=40)
    losses = w @ np.array([1.0, 2.0, 3.0]) + rng.normal(0, 0.01, 40)
    for boosting in ("gbdt", "dart"):
        model, _ = fit_regressor(w, losses, RegressionConfig(boosting_type=boosting, n_estimators=20))
        assert model.get_params()["boosting_type"] == boosting
        assert model.booster_.params["boosting_type"] == boosting


def test_spearman_rho_needs_three_test_proxies_and_has_it_with_three():
    # rho of 3 points is defined (ranks of 3 pairs); with 2 it is not: the metric is NaN, not a number
    w = np.linspace(0.05, 0.95, 15)[:, None] * np.array([1.0, -1.0]) + np.array([0.0, 1.0])
    losses = w[:, 0] * 2.0
    cfg = RegressionConfig(model="ridge", protocol="separate_early_stop", test_frac=0.2, early_stop_frac=0.2)
    _, three = fit_regressor(w, losses, cfg)  # 15 proxies: 3 test
    assert three["n_test"] == 3 and three["spearman_test"] == pytest.approx(1.0)
    _, two = fit_regressor(w[:10], losses[:10], cfg)  # 10 proxies: 2 test
    assert two["n_test"] == 2 and np.isnan(two["spearman_test"])
