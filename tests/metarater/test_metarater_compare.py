"""Comparison selections (Table 4 analogue), the evaluation store, PCA and the cross-validated rho."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.metarater import RegressionConfig, dirichlet_weights
from curation.metarater.analysis import cross_validated_spearman, weight_pca
from curation.metarater.compare import (
    EvalStore,
    ComparisonSelection,
    comparison_selections,
    gaps_to_metarater,
    rank_fraction,
    select_intersection,
    summarize,
)


def test_intersection_picks_the_best_worst_case_rank_by_hand():
    # 5 documents x 2 raters. Rank fraction = share of documents scoring at least as high.
    scaled = np.array([[5.0, 0.0],   # ranks (0.2, 1.0): top on rater 0, last on rater 1
                       [4.0, 4.0],   # (0.4, 0.4)
                       [3.0, 5.0],   # (0.6, 0.2)
                       [0.0, 3.0],   # (1.0, 0.6)
                       [2.0, 2.0]])  # (0.8, 0.8)
    assert np.allclose(rank_fraction(scaled), [[0.2, 1.0], [0.4, 0.4], [0.6, 0.2], [1.0, 0.6], [0.8, 0.8]])
    chosen, p = select_intersection(scaled, keep_frac=0.4)  # k = 2: worst ranks 1.0, 0.4, 0.6, 1.0, 0.8
    assert chosen.tolist() == [1, 2] and p == pytest.approx(0.6)  # each rater's top 60% were needed
    # Ties share the worse rank: two documents tied at the top are both "top 40%", not one top 20%.
    assert np.allclose(rank_fraction(np.array([[1.0], [1.0], [0.0], [0.0], [0.0]]))[:, 0], [0.4, 0.4, 1, 1, 1])


def test_comparison_selections_cover_every_method_and_seed():
    rng = np.random.default_rng(0)
    scaled = rng.uniform(0, 5, size=(200, 3))
    raters = ["a", "b", "c"]
    w_star = np.array([0.7, 0.2, 0.1])
    methods = ["metarater", "uniform", "intersection", "random"]
    sels = comparison_selections(scaled, raters, w_star, 0.1, methods=methods, seeds=[0, 1, 2], single_raters=True,
                                 single_rater_seeds=[0], intersection_raters=["a", "b"])
    assert [(s.method, s.seed) for s in sels][:6] == [("metarater", 0), ("metarater", 1), ("metarater", 2),
                                                      ("uniform", 0), ("uniform", 1), ("uniform", 2)]
    assert len(sels) == 4 * 3 + 3 and all(len(s.indices) == 20 for s in sels)
    by = {(s.method, s.seed): s for s in sels}
    assert np.array_equal(by["metarater", 0].indices, np.sort(np.argsort(-scaled @ w_star)[:20]))
    assert np.array_equal(by["uniform", 0].indices, np.sort(np.argsort(-scaled.mean(axis=1))[:20]))
    assert np.array_equal(by["rater:b", 0].indices, np.sort(np.argsort(-scaled[:, 1])[:20]))
    assert by["intersection", 0].info["raters"] == 2 and 0.1 <= by["intersection", 0].info["per_rater_top_frac"] <= 1
    assert not np.array_equal(by["random", 0].indices, by["random", 1].indices)
    # random: a seeded random order, then the same rule as every method (here the top 10%)
    assert np.array_equal(by["random", 1].indices, np.sort(np.argsort(-np.random.default_rng(1).random(200))[:20]))
    assert np.array_equal(by["intersection", 0].indices, select_intersection(scaled[:, :2], 0.1)[0])
    # none of the named raters scored (e.g. the model-based ones on a RedPajama-only run): all raters, not an error
    [fallback] = comparison_selections(scaled, raters, w_star, 0.1, methods=["intersection"], seeds=[0],
                                       single_raters=False, intersection_raters=["zz"])
    assert fallback.info["raters"] == 3
    assert np.array_equal(fallback.indices, select_intersection(scaled, 0.1)[0])


def test_eval_store_trains_each_selection_and_seed_once(tmp_path):
    calls = []

    def run(indices, seed):
        calls.append((tuple(indices), seed))
        return {"val_loss": float(len(indices) + seed)}

    store = EvalStore(tmp_path, bench_key="bench-1")
    first = store.evaluate(ComparisonSelection("uniform", np.array([1, 2, 3]), 0, {}), run)
    # same data, same seed
    again = store.evaluate(ComparisonSelection("metarater@N=8", np.array([1, 2, 3]), 0, {}), run)
    other = store.evaluate(ComparisonSelection("uniform", np.array([1, 2, 3]), 1, {}), run)
    assert (first["reused"], again["reused"], other["reused"]) == (False, True, False)
    assert again["val_loss"] == first["val_loss"] == 3.0 and len(calls) == 2
    assert EvalStore(tmp_path, "bench-2").path(np.array([1, 2, 3]), 0) != store.path(np.array([1, 2, 3]), 0)


def test_summary_is_mean_and_std_over_seeds_best_first():
    table = pd.DataFrame({"method": ["random", "random", "metarater", "metarater", "rater:x"],
                          "seed": [0, 1, 0, 1, 0], "val_loss": [5.0, 5.2, 4.0, 4.2, 4.5]})
    summary = summarize(table)
    assert summary["method"].tolist() == ["metarater", "rater:x", "random"]
    assert summary.loc[0, "val_loss_mean"] == pytest.approx(4.1)
    assert summary.loc[0, "val_loss_std"] == pytest.approx(np.std([4.0, 4.2], ddof=1))
    assert summary.loc[1, "val_loss_std"] == 0.0 and summary.loc[1, "seeds"] == 1


def test_gap_in_standard_errors_by_hand():
    """REPRODUCING's headline: (mean loss of other - mean loss of w*) / SE of the difference of the means.

    w*: 4.0, 4.2, 4.1 -> mean 4.1, std (ddof 1) 0.1, n 3; uniform: 4.5, 4.9 -> mean 4.7, std sqrt(0.08), n 2;
    random: 5.0 alone -> std 0 (not measured), n 1. SE(uniform) = sqrt(0.08/2 + 0.01/3) = sqrt(13/300) =
    0.2082, gap 0.6 -> 2.882 SE (with the std in place of the SE, sqrt(0.08 + 0.01) = 0.3, it would read
    2.0). SE(random) = sqrt(0 + 0.01/3) = 0.0577, gap 0.9 -> 15.59 SE. No intersection runs: no key.
    """
    table = pd.DataFrame({"method": ["metarater"] * 3 + ["uniform"] * 2 + ["random"],
                          "seed": [0, 1, 2, 0, 1, 0], "val_loss": [4.0, 4.2, 4.1, 4.5, 4.9, 5.0]})
    gaps = gaps_to_metarater(summarize(table))
    assert gaps == pytest.approx({"gap_uniform_minus_metarater": 0.6, "gap_uniform_minus_metarater_in_se": 2.8823,
                                  "gap_random_minus_metarater": 0.9, "gap_random_minus_metarater_in_se": 15.588},
                                 abs=1e-3)
    # one seed everywhere: no spread, so no gap in standard errors (not an infinite one)
    single = gaps_to_metarater(summarize(table.drop_duplicates("method")))
    assert single == pytest.approx({"gap_uniform_minus_metarater": 0.5, "gap_random_minus_metarater": 1.0})
    assert gaps_to_metarater(summarize(table[table["method"] != "metarater"])) == {}


def test_pca_and_cross_validated_spearman_on_a_known_landscape():
    optimum = np.array([0.5, 0.3, 0.1, 0.1])
    w = dirichlet_weights(120, 4, seed=5)
    losses = 3.0 + 4.0 * ((w - optimum) ** 2).sum(axis=1)
    coords, components, mean, explained = weight_pca(w)
    assert coords.shape == (120, 2) and components.shape == (2, 4) and 0 < explained.sum() <= 1
    assert np.allclose(components @ components.T, np.eye(2), atol=1e-9)
    assert np.allclose((w - mean) @ components.T, coords)
    rho, predicted = cross_validated_spearman(w, losses, RegressionConfig(n_estimators=300, learning_rate=0.05,
                                                                          early_stopping_rounds=20))
    assert rho > 0.8 and predicted.shape == (120,)
    noise = np.random.default_rng(0).normal(size=120)
    rho_noise, _ = cross_validated_spearman(w, noise, RegressionConfig(n_estimators=300, learning_rate=0.05,
                                                                       early_stopping_rounds=20))
    assert rho_noise < 0.5
