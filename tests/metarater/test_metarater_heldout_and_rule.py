"""Issue #27: a clean, corpus-proportional D_v and judge set; the official step3 regression and its warning;
the paper's selection rule (token budget, fixed domain proportions); the model-based intersection default."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from curation.metarater.config import MODEL_BASED_RATERS, MetaraterConfig, ValidationConfig, parse_metarater_config
from curation.metarater.core import (RegressionConfig, dirichlet_weights, domain_token_shares, fit_regressor,
                                     regression_warning, select_domain_budget)
from curation.metarater.proxy import TEST, VALIDATION, held_out_sets, makeup
from curation.scoring.config import ScoringConfig
from curation.scoring.reference import load_reference_corpus, training_ids


@pytest.fixture(scope="module")
def corpus() -> pd.DataFrame:
    """The whole bundled corpus (the reference raters' training data) with its categories."""
    return load_reference_corpus(ScoringConfig().training.reference_path).reset_index(drop=True)


def _trained(corpus: pd.DataFrame, holdout_fraction: float) -> tuple[dict[str, set[str]], np.ndarray]:
    cfg = ScoringConfig()
    cfg.training.holdout_fraction = holdout_fraction
    ids = training_ids(cfg, corpus)
    return ids, corpus["id"].isin(set().union(*ids.values())).to_numpy()


def test_default_dv_matches_the_corpus_mix_and_no_rater_trained_on_it(corpus):
    ids, trained = _trained(corpus, 0.1)
    assert set(ids) == {"fasttext", "wiki", "edu", "dsir"} and all(len(v) > 100 for v in ids.values())
    held = held_out_sets(corpus, ValidationConfig(), trained)
    corpus_share = corpus["category"].value_counts(normalize=True)
    for name in (VALIDATION, TEST):
        member = (held["set"] == name).fillna(False).to_numpy(dtype=bool)
        assert 400 < member.sum() < 600  # 3% of 16,513 documents each
        share = corpus.loc[member, "category"].value_counts(normalize=True)
        assert (share.reindex(corpus_share.index).fillna(0) - corpus_share).abs().max() <= 0.02
        # the overlap test: no held-out document is in any rater's training rows
        for rater, rows in ids.items():
            assert not set(corpus.loc[member, "id"]) & rows, f"{name} documents in {rater}'s training data"
    assert held["set"].isin([VALIDATION, TEST]).sum() == held["set"].notna().sum()
    metrics = makeup(corpus, held)
    assert metrics["validation_max_share_gap"] <= 0.02 and metrics["test_max_share_gap"] <= 0.02
    assert metrics["corpus_share_web"] == pytest.approx(corpus_share["web"])


def test_without_a_rater_holdout_the_clean_dv_is_refused_and_the_old_set_stays_an_option(corpus):
    _, trained = _trained(corpus, 0.0)  # the raters train on every encyclopedic and book document
    with pytest.raises(ValueError, match="holdout_fraction"):
        held_out_sets(corpus, ValidationConfig(), trained)
    old = held_out_sets(corpus, ValidationConfig(source="high_quality", test_fraction=0.0), trained)
    groups = set(old["group"].dropna())
    assert groups == {"encyclopedic", "books", "label_1.0"} and set(old["set"].dropna()) == {VALIDATION}


def test_domain_budget_selection_honours_proportions_and_token_budget(corpus):
    rng = np.random.default_rng(0)
    lengths = corpus["text"].str.split().str.len().to_numpy()  # any positive per-document size
    categories = corpus["category"].to_numpy(dtype=str)
    score = rng.normal(size=len(corpus)) + (categories == "web")  # a score that prefers web, as raters may
    budget = 0.15 * lengths.sum()
    for proportions in (domain_token_shares(categories, lengths),
                        {"web": 0.3, "books": 0.3, "encyclopedic": 0.1, "docs": 0.2, "forum": 0.1}):
        chosen = select_domain_budget(score, categories, lengths, budget, proportions)
        tokens = lengths[chosen].sum()
        assert abs(tokens / budget - 1) < 0.01
        got = pd.Series(lengths[chosen]).groupby(categories[chosen]).sum() / tokens
        assert max(abs(got[k] - v) for k, v in proportions.items()) < 0.01
        # within each category the best documents by score are taken
        web = np.flatnonzero(categories == "web")
        kept = np.isin(web, chosen)
        assert score[web][kept].min() >= score[web][~kept].max()
    with pytest.raises(ValueError, match="'encyclopedic' holds"):  # a share the category cannot fill
        select_domain_budget(score, categories, lengths, budget, {"web": 0.5, "encyclopedic": 0.5})
    with pytest.raises(KeyError, match="novels"):
        select_domain_budget(score, categories, lengths, budget, {"novels": 1.0})


def _step3(weights: np.ndarray, losses: np.ndarray):
    """pipeline/step3_train_regressor.py of the official Meta-rater code, re-expressed."""
    import lightgbm as lgb

    n = len(losses)
    train_n = int(n * 0.8)
    gbm = lgb.LGBMRegressor(boosting_type="gbdt", objective="regression", metric=["l1", "l2"], num_iterations=1000,
                            seed=42, learning_rate=1e-2, verbosity=-1)
    gbm.fit(weights[:train_n], losses[:train_n], eval_set=[(weights[train_n:], losses[train_n:])], eval_metric="l2",
            callbacks=[lgb.early_stopping(stopping_rounds=5, verbose=False)])
    return gbm


def test_the_paper_regressor_is_official_step3(recwarn):
    w = dirichlet_weights(128, 17, seed=3)
    losses = 3 + w @ np.random.default_rng(0).normal(size=17) + np.random.default_rng(1).normal(0, 0.02, 128)
    from curation.metarater.config import PRESETS

    cfg = PRESETS["paper"].regression
    assert (cfg.protocol, cfg.early_stopping_rounds, cfg.test_frac, cfg.min_child_samples) == ("official", 5, 0.2, None)
    model, m = fit_regressor(w, losses, cfg)
    reference = _step3(w, losses)
    assert (m["n_train"], m["n_test"], m["min_child_samples"]) == (102, 26, 20)  # 20: LightGBM's default at N=128
    assert model.best_iteration_ == reference.best_iteration_
    probe = dirichlet_weights(500, 17, seed=9)
    assert np.allclose(model.predict(probe), reference.predict(probe))


def test_min_child_samples_lets_small_n_split_and_a_constant_regressor_warns():
    w = dirichlet_weights(32, 17, seed=0)
    losses = 3 + 2 * w[:, 0] + np.random.default_rng(0).normal(0, 0.01, 32)
    _, auto = fit_regressor(w, losses, RegressionConfig())  # 25 training rows: auto = 11, trees split
    assert auto["min_child_samples"] == 11 and auto["constant"] == 0 and auto["best_iteration"] > 2
    assert regression_warning(auto) is None
    # forced: LightGBM's 20 on 25 rows can never split -> a constant model, stopped at once
    _, forced = fit_regressor(w, losses, RegressionConfig(min_child_samples=20))
    assert forced["constant"] == 1 and forced["stopped_early"] == 1
    text = regression_warning(forced)
    assert text.startswith("the LightGBM regressor learned nothing (predicts one value for every weight vector")
    assert "25 training proxies, min_child_samples 20" in text


def test_intersection_defaults_to_the_model_based_raters_and_the_rule_to_the_domain_budget():
    cfg = MetaraterConfig()
    assert cfg.comparisons.intersection_raters == list(MODEL_BASED_RATERS)
    assert set(MODEL_BASED_RATERS) == {"fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki"}
    assert cfg.selection_rule == "domain_budget" and cfg.validation.source == "holdout"
    assert 0 not in cfg.comparisons.seeds and cfg.proxy.seed == 0 and len(cfg.comparisons.seeds) >= 3
    with pytest.raises(ValueError, match="domain_proportions"):
        parse_metarater_config({"domain_proportions": {"web": 0.5}})
    with pytest.raises(ValueError, match="validation.path"):
        parse_metarater_config({"validation": {"source": "file"}})


def test_the_run_summary_says_what_dv_is_and_warns_about_a_constant_regressor():
    from curation.tracking.summary import RunRecord, build_sections

    w = dirichlet_weights(32, 17, seed=0)
    _, forced = fit_regressor(w, 3 + w[:, 0], RegressionConfig(min_child_samples=20))  # a forced constant model
    data = {"candidates": 900.0, "validation_docs": 50.0, "validation_share_web": 0.42, "validation_share_books": 0.58,
            "validation_max_share_gap": 0.004}
    record = RunRecord(pipelines=["metarater"], params={"metarater": {"validation": {"source": "holdout"}}},
                       metrics={"metarater_data_metrics": data,
                                "metarater_regression_metrics": {f"regression_{k}": v for k, v in forced.items()}})
    section = next(s for s in build_sections(record) if s.title == "metarater")
    rows = dict(section.rows)
    assert rows["held out"] == "D_v (holdout): 50 docs, books 58.0%, web 42.0% (max gap to the corpus 0.4 pt)"
    assert rows["WARNING"].startswith("the LightGBM regressor learned nothing")


def test_the_rater_holdout_is_off_by_default_and_keeps_existing_rater_digests(corpus):
    from curation.scoring.reference import _training_params
    from curation.scoring.training_sets import build_training_set, holdout_rows

    cfg = ScoringConfig()
    assert cfg.training.holdout_fraction == 0 and "holdout_fraction" not in _training_params(cfg)
    assert not holdout_rows(corpus["id"].tolist(), 0.0).any()
    cfg.training.holdout_fraction = 0.1
    held = holdout_rows(corpus["id"].tolist(), 0.1)
    assert 0.09 < held.mean() < 0.11 and _training_params(cfg)["holdout_fraction"] == 0.1
    ts = build_training_set(corpus, cfg.training)
    assert not set(ts.positive_ids + ts.negative_ids) & set(corpus.loc[held, "id"])


def test_a_rater_holdout_never_reuses_a_reference_rater_trained_on_the_held_out_rows():
    """Every reference artifact the raters load (fastText x2, DSIR targets; the heads share _training_params)
    gets a new digest under a hold-out, so a D_v drawn from the reserved rows is not in a reused rater's data."""
    from curation.embedding.artifacts import spec_digest
    from curation.scoring.reference import _training_params, dsir_spec, fasttext_spec

    off, on = ScoringConfig(), ScoringConfig()
    on.training.holdout_fraction = 0.1
    for spec in (lambda c: fasttext_spec("fasttext_dclm", c), lambda c: fasttext_spec("fasttext_ultrafineweb", c),
                 dsir_spec):
        assert spec_digest(spec(off)) != spec_digest(spec(on))
    assert _training_params(off) != _training_params(on)  # heads_spec hashes these
