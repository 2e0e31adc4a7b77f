"""Fitted raters saved as a folder, loaded back, and re-scoring with identical results."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pandas as pd
import pytest

from curation.datasets.rater_models import RaterModelsDataset
from curation.scoring import score_corpus, scoring_config_from_dict
from tests.scoring.conftest import write_shards
from curation.scoring.persistence import RaterFolder, load_raters, read_manifest, write_raters_atomically

SMALL = {
    "training": {"source": "corpus"},  # trained on these rows' own labels (reference: test_scoring_reference.py)
    "fasttext_dclm": {"bucket": 20000, "thread": 1, "quantize": False},
    "fasttext_ultrafineweb": {"bucket": 20000, "thread": 1, "min_count": 1, "quantize": False},
    "edu": {"max_per_rule": 16},
    "dsir": {"targets": {"wikipedia": ["encyclopedic"]}},  # the subset has no books
}
SAVED = {"fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki", "wikipedia_importance"}


@pytest.fixture(scope="module")
def fitted(embed_subset, subset_embeddings, embedder):
    return score_corpus(embed_subset, scoring_config_from_dict(SMALL), embeddings=subset_embeddings, embedder=embedder)


@pytest.fixture(scope="module")
def saved(fitted, tmp_path_factory):
    folder = tmp_path_factory.mktemp("models") / "raters"
    write_raters_atomically(fitted.raters, folder, meta={"documents": 160})
    return folder


def test_folder_holds_every_fitted_rater(saved):
    manifest = read_manifest(saved)
    assert set(manifest["raters"]) == SAVED and manifest["meta"] == {"documents": 160}
    names = {p.name for p in saved.iterdir()}
    assert {"fasttext_dclm.bin", "fasttext_dclm.json", "fasttext_ultrafineweb.bin", "edu.joblib", "wiki.joblib",
            "wikipedia_importance.npz", "manifest.json"} <= names
    ufw = json.loads((saved / "fasttext_ultrafineweb.json").read_text())
    assert (ufw["recipe"], ufw["dim"], ufw["config_class"]) == ("ultrafineweb", 256, "UltraFineWebConfig")


def test_rescoring_with_the_saved_raters_gives_identical_scores(fitted, saved, embed_subset, subset_embeddings,
                                                                embedder):
    cfg = scoring_config_from_dict({**SMALL, "pretrained_dir": str(saved)})
    again = score_corpus(embed_subset, cfg, embeddings=subset_embeddings, embedder=embedder)
    pd.testing.assert_frame_equal(again.scores, fitted.scores)  # every rater, the signals and quality
    assert all(again.metrics[f"{name}/pretrained"] == 1.0 for name in SAVED)
    assert not any(key.endswith("/fit/seconds") for key in again.metrics)  # nothing was trained


def test_a_rater_missing_from_the_folder_is_an_error(saved, embed_subset, subset_embeddings):
    cfg = scoring_config_from_dict({**SMALL, "pretrained_dir": str(saved),
                                    "dsir": {"targets": {"books": ["books"]}}})
    with pytest.raises(KeyError, match="books_importance"):
        score_corpus(embed_subset, cfg, embeddings=subset_embeddings)
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        load_raters(saved.parent)


def test_a_loaded_fasttext_rater_is_saved_again_without_refitting(saved, tmp_path, embed_subset):
    texts = embed_subset["text"].tolist()[:40]
    loaded = load_raters(saved, ["fasttext_dclm"])
    write_raters_atomically(loaded, tmp_path / "again")
    np.testing.assert_array_equal(load_raters(tmp_path / "again")["fasttext_dclm"].score(texts),
                                  loaded["fasttext_dclm"].score(texts))


def test_dataset_replaces_the_folder_and_logs_it_to_mlflow(fitted, saved, tmp_path, embed_subset):
    target = tmp_path / "06_models" / "default" / "raters"
    dataset = RaterModelsDataset(path=str(target))
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = mlflow.create_experiment("t", artifact_location=str(tmp_path / "artifacts"))
    with mlflow.start_run(experiment_id=experiment) as run:
        dataset.save(RaterFolder(raters=fitted.raters))          # fitted in this run: every file
        dataset.save(RaterFolder(directory=saved, fresh=False))  # a cache hit: the manifest only
    assert sorted(p.name for p in target.parent.iterdir()) == ["raters"]  # no .tmp / .old folders left
    logged = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "raters")}
    assert {"raters/fasttext_dclm.bin", "raters/edu.joblib", "raters/wikipedia_importance.npz",
            "raters/manifest.json"} <= logged
    reloaded = dataset.load().load(["wiki", "wikipedia_importance"])
    texts = embed_subset["text"].tolist()
    np.testing.assert_array_equal(reloaded["wikipedia_importance"].score(texts),
                                  fitted.scores["wikipedia_importance"].to_numpy())
    assert read_manifest(target)["meta"] == {"documents": 160}  # the second save replaced the first


def test_node_hands_on_the_raters_on_a_cache_hit_too(embed_subset, tmp_path):
    from curation.scoring.cached import score_cached as score_documents

    cache = {"dir": str(tmp_path / "cache"), "enabled": True}
    scoring = {"raters": ["dsir", "redpajama"], "dsir": {"targets": {"wikipedia": ["encyclopedic"]}},
               "training": {"source": "corpus"}}
    documents = write_shards(embed_subset, tmp_path / "documents", 3)
    first = score_documents(documents, None, scoring, cache)
    second = score_documents(documents, None, scoring, cache)
    assert (first[1]["scoring_cache_hit"], second[1]["scoring_cache_hit"]) == (0.0, 1.0)
    assert (first[3].fresh, second[3].fresh) == (True, False)
    assert second[3].directory == first[3].directory and set(second[3].load()) == {"wikipedia_importance"}
    pd.testing.assert_frame_equal(first[0].to_frame(), second[0].to_frame())
    assert first[0].root == second[0].root and first[0].keep  # the cache entry itself, published as links
