"""scoring.engine=ray on a local 2-CPU Ray instance with a few hundred real documents.

The Ray tests share one Ray instance (module fixture, shut down after) and
keep to fastText with small hash tables, DSIR and the signals (no embeddings),
so the module stays well under a minute on 2 cores.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from curation.scoring import SIGNALS, score_corpus, scoring_config_from_dict
from curation.scoring.ray_engine import RayConfig, align_by_id, check_cpu_budget, import_ray, score_with_ray

TEXT_RATERS = ["fasttext_dclm", "fasttext_ultrafineweb", "dsir", "redpajama"]
# thread 1: fastText training is then deterministic, so both engines fit the same models
SMALL = {
    "raters": TEXT_RATERS,
    "fasttext_dclm": {"bucket": 20000, "thread": 1},
    "fasttext_ultrafineweb": {"bucket": 20000, "thread": 1, "min_count": 1},
}
# 4 blocks and small batches: both actors get work even on a few hundred documents
RAY = {"batch_size": 64, "repartition": 4, "rows_per_shard": 100}


@pytest.fixture(scope="module")
def local_ray():
    ray = import_ray()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def documents(corpus_sample) -> pd.DataFrame:
    """~300 real rows: the human-labelled eval/train rows plus every category (fastText needs both classes)."""
    return corpus_sample.iloc[::3].reset_index(drop=True)


def test_node_with_ray_engine_equals_inprocess_scores(local_ray, documents, tmp_path_factory):
    from curation.scoring.cached import score_cached as score_documents

    cache = {"dir": str(tmp_path_factory.mktemp("cache")), "enabled": True}
    scores, metrics, _, models = score_documents(documents, np.zeros((len(documents), 0), np.float32),
                                                 {**SMALL, "engine": "ray", "ray": RAY}, cache)
    # the fitted raters the Ray actors used are handed on (for data/06_models) ...
    assert set(models.load()) == {"fasttext_dclm", "fasttext_ultrafineweb", "books_importance",
                                  "wikipedia_importance"}
    # ... and the in-process engine applies the very same models
    inprocess = score_corpus(documents, scoring_config_from_dict({**SMALL, "pretrained_dir": str(models.directory)}))
    expected = inprocess.scores
    assert list(scores.columns) == list(expected.columns) and list(scores["id"]) == list(documents["id"])
    # the signals and DSIR are the same arithmetic on the same text: identical
    for col in [*SIGNALS, "books_importance", "wikipedia_importance"]:
        np.testing.assert_array_equal(scores[col].to_numpy(), expected[col].to_numpy(), err_msg=col)
    for col in ("fasttext_dclm", "fasttext_ultrafineweb"):
        np.testing.assert_allclose(scores[col].to_numpy(), expected[col].to_numpy(), rtol=0, atol=1e-6, err_msg=col)
    assert scores["fasttext_dclm"].notna().all() and scores["fasttext_dclm"].nunique() > 10
    # the same bad-input counts as the in-process engine (the node flattens "/" to "_")
    for key in ("fasttext_dclm/total", "fasttext_dclm/empty_text", "fasttext_ultrafineweb/nan_score",
                "wikipedia_importance/empty_text", "redpajama/empty_text", "redpajama/nan_doc_mean_word_length"):
        assert metrics[key.replace("/", "_")] == inprocess.metrics[key], key
    assert metrics["fasttext_dclm_train_positives"] > 0  # fitted in the driver, on the training split
    assert metrics["ray_job_seconds"] > 0 and metrics["ray_docs_per_s"] > 0


def test_rerun_into_the_same_output_folder_does_not_double_rows(local_ray, documents, tmp_path):
    docs = documents[["id", "text"]].head(60)
    out = tmp_path / "scored"
    cfg = RayConfig(**RAY, actors=1, output_path=str(out))
    for _ in range(2):
        frame, _ = score_with_ray(docs, {}, cfg, signals=True)
    on_disk = pd.read_parquet(out)
    assert len(on_disk) == len(docs) and on_disk["id"].is_unique  # write_parquet alone would append: 120
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scored"]  # no temporary folder left behind
    assert list(frame["id"]) == list(docs["id"])


def _shard(tmp_path, frame: pd.DataFrame) -> str:
    folder = tmp_path / "input"
    folder.mkdir()
    frame[["id", "text"]].iloc[: len(frame) // 2].to_parquet(folder / "a.parquet", index=False)
    frame[["id", "text"]].iloc[len(frame) // 2:].to_parquet(folder / "b.parquet", index=False)
    return str(folder)


def test_a_lost_or_duplicated_row_raises(local_ray, documents, tmp_path):
    docs = documents[["id", "text"]].head(60)
    # the input shards miss document 7 and hold document 3 twice
    shards = _shard(tmp_path, pd.concat([docs.drop(index=[7]), docs.iloc[[3]]]))
    with pytest.raises(ValueError) as err:
        score_with_ray(docs, {}, RayConfig(**RAY, actors=1, input_path=shards))
    assert f"1 id(s) missing (e.g. ['{docs['id'][7]}'])" in str(err.value)
    assert f"1 id(s) returned more than once (e.g. ['{docs['id'][3]}'])" in str(err.value)


def test_align_by_id_reorders_and_names_every_kind_of_mismatch():
    returned = pd.DataFrame({"id": ["b", "a", "c"], "x": [2.0, 1.0, 3.0]})
    assert align_by_id(pd.Series(["a", "b", "c"]), returned)["x"].tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match=r"0 id\(s\) missing, 0 id\(s\) returned more than once, 1 id\(s\) not among"):
        align_by_id(pd.Series(["a", "b"]), returned)
    with pytest.raises(ValueError, match="not unique"):
        align_by_id(pd.Series(["a", "a", "b", "c"]), returned)


def test_an_actor_pool_that_would_starve_the_reads_is_refused():
    # Ray's default of 1 CPU per actor: 2 actors take both cores and the read tasks never run
    with pytest.raises(ValueError, match="less than 1 CPU"):
        check_cpu_budget(RayConfig(actors=2, actor_num_cpus=1.0), cluster_cpus=2.0)
    check_cpu_budget(RayConfig(actors=2, actor_num_cpus=0.5), cluster_cpus=2.0)


def test_missing_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match=r"\.\[ray\]"):
        import_ray()
