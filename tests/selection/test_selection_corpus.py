"""Budgets and corpus picking (curation.selection.corpus): the one place every path picks documents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.metarater import select_top
from curation.selection.corpus import (
    CorpusSpec,
    candidate_pool,
    corpus_documents,
    resolve_budget,
    run_selection,
    top_fraction,
)

REPO = Path(__file__).resolve().parents[2]


def test_budget_against_the_corpus_or_the_candidate_subsample():
    assert resolve_budget({"keep_ratio": 0.1, "docs": None}, 1000, 600) == 100
    # a 300-item subsample of 600 pruned candidates keeps the corpus keep ratio: 0.1 * 1000 * 300/600
    assert resolve_budget({"keep_ratio": 0.1, "docs": None}, 1000, 600, 300) == 50
    assert resolve_budget({"keep_ratio": 0.1, "docs": None, "ratio_of": "candidates"}, 1000, 600, 300) == 30
    with pytest.raises(ValueError, match="ratio_of"):
        resolve_budget({"keep_ratio": 0.1, "ratio_of": "tokens"}, 1000, 600)
    with pytest.raises(ValueError, match="budget of 400"):
        resolve_budget({"keep_ratio": 0.1, "docs": 400}, 1000, 600, 300)
    pool = candidate_pool(600, {"candidates": 300}, seed=3)
    assert len(pool) == 300 and len(np.unique(pool)) == 300 and (np.diff(pool) > 0).all()
    assert np.array_equal(pool, candidate_pool(600, {"candidates": 300}, seed=3))
    assert np.array_equal(candidate_pool(600, {"candidates": None}, seed=3), np.arange(600))


@pytest.fixture
def scored(corpus_sample):
    """The real documents, scored by their length in characters (a real, reproducible signal)."""
    documents = corpus_sample[["id", "text"]].head(200).reset_index(drop=True)
    scores = pd.DataFrame({"id": documents["id"], "quality": documents["text"].str.len().astype("float64")})
    return documents, scores, np.zeros((len(documents), 4), dtype="float32")


def test_top_fraction_is_the_top_share_with_ties_to_the_earlier_document(scored):
    _, scores, _ = scored
    q = scores["quality"].to_numpy()
    chosen = top_fraction(q, 0.1)
    assert len(chosen) == 20 and (np.diff(chosen) > 0).all()
    assert q[chosen].min() >= np.sort(q)[-20]
    assert top_fraction(np.array([1.0, 2.0, 2.0, 0.0]), 0.25).tolist() == [1]
    # Meta-rater picks through the same function (a wrapper: curation.metarater.core imports selection lazily)
    assert select_top(q, 0.1).tolist() == chosen.tolist()
    assert select_top(np.array([1.0, 2.0, 2.0, 0.0]), 0.25).tolist() == [1]
    with pytest.raises(ValueError, match="keep_frac"):
        top_fraction(q, 0.0)


def test_a_named_corpus_and_the_selection_run_pick_the_same_top_documents(scored, tmp_path):
    documents, scores, embeddings = scored
    budget = {"docs": 30, "keep_ratio": None}
    spec = CorpusSpec(method="topk_quality", pool="raw", score="quality")
    cache = {"dir": str(tmp_path), "enabled": True}
    chosen, metrics = corpus_documents(documents, scores, embeddings, scores, embeddings, spec, budget, 0, cache)
    longest = set(scores.nlargest(30, "quality", keep="first")["id"])
    assert set(chosen["id"]) == longest and metrics["corpus_docs"] == 30 and metrics["corpus_cache_hit"] == 0
    assert list(chosen["id"]) == [i for i in documents["id"] if i in longest]  # documents order
    again, metrics = corpus_documents(documents, scores, embeddings, scores, embeddings, spec, budget, 0, cache)
    assert again.equals(chosen) and metrics["corpus_cache_hit"] == 1
    run = run_selection(scores, embeddings, documents, {"method": "topk_quality"}, budget, seed=0)
    assert set(run.selected_ids["id"]) == longest and run.selected_documents.equals(chosen)
    assert run.metrics["budget_docs"] == 30 and run.metrics["candidates"] == len(documents)
    with pytest.raises(KeyError, match="edu"):
        corpus_documents(documents, scores, embeddings, scores, embeddings,
                         CorpusSpec(method="topk_quality", score="edu"), budget, 0, {**cache, "enabled": False})


def test_a_corpus_recipe_with_an_unknown_method_or_key_fails_when_the_config_is_read():
    with pytest.raises(ValueError, match=r"table2.corpora.x.*greedy_disf"):
        CorpusSpec(method="greedy_disf").validate("table2.corpora.x")  # a conf/selection file, not a method
    with pytest.raises(ValueError, match=r"table2.corpora.y.*lamda"):
        CorpusSpec(method="greedy", config={"lamda": 0.0}).validate("table2.corpora.y")
    assert CorpusSpec(method="greedy", pool="pruned", config={"diversity": "disf", "lam": 0.0}).validate("ok")


@pytest.mark.parametrize("experiment", ["table2_tiny", "ufw_rank_agreement"])
def test_every_corpus_recipe_of_the_evidence_experiments_is_a_valid_selection(experiment):
    from curation.config_loader import compose_config

    cfg = compose_config(REPO / "conf", overrides=[f"experiment={experiment}"])
    recipes = cfg["table2"]["corpora"] if experiment == "table2_tiny" else cfg["verification"]["candidates"]
    assert {"raw", "semdedup", "edu", "ultrafineweb", "dclm", "greedy_disf", "datamask_paper", "datamask"} <= set(recipes)
    for name, recipe in recipes.items():
        CorpusSpec(**recipe).validate(name)  # raises on a wrong method or key
