"""Edu regressor and Wiki similarity on real embeddings of real documents."""

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from curation.scoring import EduConfig, EduRater, WikiConfig, WikiRater, build_edu_annotations, human_label_split


def test_default_annotations_use_llm_scores_and_documented_weak_labels(full_corpus):
    table, counts = build_edu_annotations(full_corpus)
    assert counts["corpus_llm_edu_score"] == 150  # every fineweb_edu_scorer row
    assert counts["weak_page_type-product-service-listing-collection"] == 150
    assert counts["weak_category-encyclopedic"] == 150
    llm = table[table["origin"] == "corpus_llm_edu_score"]
    assert llm["score"].between(2, 5).all()
    assert set(table.loc[table["origin"].str.startswith("weak_page"), "score"]) == {0.0}
    # each table row points at its corpus row
    assert (full_corpus["text"].to_numpy()[table["row"].to_numpy()] == table["text"].to_numpy()).all()
    eval_rows = set(np.flatnonzero(human_label_split(full_corpus).to_numpy() == "eval"))
    assert eval_rows.isdisjoint(table["row"])


def test_annotation_file_plugs_in(full_corpus, tmp_path):
    # a FineWeb-Edu-style (text, score) file, here made of real corpus rows
    rows = full_corpus[full_corpus["source"] == "fineweb_edu_scorer"].head(20)
    path = tmp_path / "ann.parquet"
    pd.DataFrame({"text": rows["text"], "score": rows["extra"].map(lambda s: json.loads(s)["llm_edu_score_0_5"])}).to_parquet(path)
    table, counts = build_edu_annotations(None, EduConfig(annotations_path=str(path), use_weak_labels=False))
    assert counts == {"annotations_file": 20} and (table["row"] == -1).all()
    with pytest.raises(KeyError, match="lacks columns"):
        build_edu_annotations(None, EduConfig(annotations_path=str(path), score_column="int_score"))


def test_edu_regressor_on_frozen_embeddings(embed_subset, subset_embeddings, embedder, tmp_path):
    table, counts = build_edu_annotations(embed_subset, EduConfig(max_per_rule=16))
    assert counts["corpus_llm_edu_score"] == (embed_subset["source"] == "fineweb_edu_scorer").sum()
    rater = EduRater(EduConfig(), embedder).fit_embeddings(subset_embeddings[table["row"].to_numpy()], table["score"].to_numpy())
    s = rater.score_embeddings(subset_embeddings)
    assert np.all((s >= 0) & (s <= 5))
    # held-out rows (not in the table): Wikipedia leads score above commerce pages
    held = ~np.isin(np.arange(len(embed_subset)), table["row"])
    pt = embed_subset["extra"].map(lambda x: json.loads(x).get("page_type")).isin(["product", "service", "listing", "collection"])
    wiki = held & (embed_subset["category"] == "encyclopedic").to_numpy()
    shop = held & pt.to_numpy()
    assert s[wiki].mean() > s[shop].mean() + 1.0
    # texts path == embeddings path; empty text is NaN and counted
    texts = embed_subset["text"].tolist()[:5] + [""]
    st, counts = rater.score_counted(texts)
    np.testing.assert_allclose(st[:5], s[:5], atol=1e-4)
    assert np.isnan(st[5]) and counts["empty_text"] == 1 and counts["nan_score"] == 1
    rater.save(tmp_path / "edu.joblib")
    again = EduRater.load(tmp_path / "edu.joblib", embedder)
    np.testing.assert_array_equal(again.score_embeddings(subset_embeddings), s)


def test_wiki_on_embeddings_separates_held_out_pages(embed_subset, subset_embeddings, embedder):
    cat = embed_subset["category"].to_numpy()
    unl = embed_subset["quality_label"].isna().to_numpy()
    ency = np.flatnonzero(cat == "encyclopedic")
    web = np.flatnonzero((cat == "web") & unl)
    train = np.r_[ency[::2], web[::2]]
    y = np.r_[np.ones(len(ency[::2])), np.zeros(len(web[::2]))]
    rater = WikiRater(WikiConfig(), embedder).fit_features(subset_embeddings[train], y)
    test = np.r_[ency[1::2], web[1::2]]
    yt = np.r_[np.ones(len(ency[1::2])), np.zeros(len(web[1::2]))]
    s = rater.score_embeddings(subset_embeddings[test])
    assert np.all((s >= 0) & (s <= 1)) and roc_auc_score(yt, s) > 0.9


def test_wiki_on_hashed_ngrams(corpus_sample, tmp_path):
    df = corpus_sample[corpus_sample["quality_label"].isna()]
    ency, web = df[df["category"] == "encyclopedic"]["text"].tolist(), df[df["category"] == "web"]["text"].tolist()
    rater = WikiRater(WikiConfig(features="hashed_ngrams")).fit(ency[::2], web[::2])
    s = rater.score(ency[1::2] + web[1::2])
    assert roc_auc_score(np.r_[np.ones(len(ency[1::2])), np.zeros(len(web[1::2]))], s) > 0.9
    _, counts = rater.score_counted(ency[:2] + [" "])
    assert counts == {"total": 3, "scored": 2, "empty_text": 1, "nan_score": 1}
    rater.save(tmp_path / "wiki.joblib")
    np.testing.assert_array_equal(WikiRater.load(tmp_path / "wiki.joblib").score(ency[:5]), rater.score(ency[:5]))
