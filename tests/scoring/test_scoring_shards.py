"""Scoring on shards (issue 14) on ~900 real documents cut into 6 shards: fit on a sample, apply
per shard. Sharded = one frame when the sample is every document; a smaller sample is the same
whatever the sharding; a killed run resumes to identical output; misaligned embeddings are refused."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from curation.scoring import MergeMap, MergeConfig, quantile_map, score_corpus, scoring_config_from_dict
from curation.scoring.sharded import score_shards
from curation.shards.lineage import LineageError
from tests.scoring.conftest import write_shards

# thread 1: fastText training is deterministic, so both paths fit the same models
SMALL = {
    "training": {"source": "corpus"},  # trained on these rows' own labels (reference: test_scoring_reference.py)
    "fasttext_dclm": {"bucket": 20000, "thread": 1, "quantize": False},
    "fasttext_ultrafineweb": {"bucket": 20000, "thread": 1, "min_count": 1, "quantize": False},
    "edu": {"max_per_rule": 16},
}
COUNTS = ("fasttext_dclm/total", "fasttext_dclm/empty_text", "fasttext_ultrafineweb/nan_score", "edu/total",
          "wiki/nan_score", "books_importance/empty_text", "redpajama/empty_text", "merge/nan_quality")


@pytest.fixture(scope="module")
def docs(corpus_sample) -> pd.DataFrame:
    return corpus_sample


@pytest.fixture(scope="module")
def vectors(docs) -> np.ndarray:
    from curation.embedding import EmbedderConfig, make_embedder

    config = EmbedderConfig(backend="static", dim=256, pca_dims=256, max_seq_length=256, sort_by_length=False,
                            device="cpu", show_progress=False, num_workers=1)
    return make_embedder(config).encode(docs["text"].tolist()).embeddings


@pytest.fixture(scope="module")
def six(docs, vectors, tmp_path_factory):
    root = tmp_path_factory.mktemp("six")
    documents = write_shards(docs, root / "documents", 6)
    embeddings = write_shards(vectors, root / "embeddings", 6, stage="embedding", aligned_with=documents.fingerprint)
    return documents, embeddings


@pytest.fixture(scope="module")
def one_frame(docs, vectors):
    return score_corpus(docs, scoring_config_from_dict(SMALL), embeddings=vectors)


@pytest.fixture(scope="module")
def sharded(six, tmp_path_factory):
    documents, embeddings = six
    folder = tmp_path_factory.mktemp("stage")
    return score_shards(documents, embeddings, scoring_config_from_dict(SMALL), folder), folder


def test_six_shards_equal_the_one_frame_scores(one_frame, sharded, six, docs):
    result, _ = sharded
    documents, _ = six
    scores = result.scores.to_frame()
    assert result.scores.names == documents.names
    assert [s.rows for s in result.scores.manifest.shards] == [s.rows for s in documents.manifest.shards]
    assert result.scores.manifest.aligned_with == documents.fingerprint
    assert set(result.scores.manifest.inputs) == {"documents", "embeddings"}
    expected = one_frame.scores
    assert list(scores.columns) == list(expected.columns)  # id, raters, <c>_0_5, quality: today's order
    pd.testing.assert_frame_equal(scores, expected, check_exact=True)
    assert scores["quality"].between(0, 15).all() and scores["quality"].nunique() > 100
    # every document was in the fit sample (the default 200k covers it) ...
    assert result.metrics["fit/sample_docs"] == len(docs)
    # ... bad-input counts add up across the six shards, and the ROC-AUCs are the one-frame ones
    for key in COUNTS:
        assert result.metrics[key] == one_frame.metrics[key], key
    for key in [k for k in one_frame.metrics if k.startswith("roc_auc/")]:
        assert result.metrics[key] == pytest.approx(one_frame.metrics[key], abs=1e-12, nan_ok=True), key
    assert result.metrics["fasttext_dclm/total"] == len(docs)


def test_a_killed_run_resumes_to_identical_scores(six, sharded):
    result, folder = sharded
    documents, embeddings = six
    expected = result.scores.fingerprint
    fit_stamp = (folder / "fit" / "metrics.json").stat().st_mtime_ns
    out = folder / "scores"
    kept = (out / "shards" / "part-00000.parquet").stat().st_mtime_ns
    (out / "manifest.json").unlink()
    (out / "completions" / "part-00002").unlink()  # killed after writing shard 2, before its marker
    (out / "shards" / "part-00004.parquet").unlink()
    (out / "completions" / "part-00004").unlink()
    resumed = score_shards(documents, embeddings, scoring_config_from_dict(SMALL), folder)
    assert not resumed.cache_hit and resumed.scores.fingerprint == expected
    assert (out / "shards" / "part-00000.parquet").stat().st_mtime_ns == kept  # finished shards skipped
    assert (folder / "fit" / "metrics.json").stat().st_mtime_ns == fit_stamp  # the fit is not redone
    again = score_shards(documents, embeddings, scoring_config_from_dict(SMALL), folder)
    assert again.cache_hit and again.scores.fingerprint == expected
    assert again.metrics["fasttext_dclm/total"] == result.metrics["fasttext_dclm/total"]


def test_a_smaller_fit_sample_is_the_same_whatever_the_sharding(docs, vectors, six, tmp_path):
    # the merge components and DSIR only (fastText x2 and the signals are covered above): three fits stay quick
    cfg = scoring_config_from_dict({**SMALL, "raters": ["fasttext_dclm", "edu", "wiki", "dsir"],
                                    "fit_sample_docs": 400})
    documents, embeddings = six
    six_shards = score_shards(documents, embeddings, cfg, tmp_path / "six")
    one_doc = write_shards(docs, tmp_path / "one_documents", 1)
    one_emb = write_shards(vectors, tmp_path / "one_embeddings", 1, stage="embedding", aligned_with=one_doc.fingerprint)
    one_shard = score_shards(one_doc, one_emb, cfg, tmp_path / "one")
    assert six_shards.metrics["fit/sample_docs"] == one_shard.metrics["fit/sample_docs"] == 400
    a, b = six_shards.scores.to_frame(), one_shard.scores.to_frame()
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert a["quality"].between(0, 15).all() and len(a) == len(docs)
    # the one-frame entry draws the same sample
    pd.testing.assert_frame_equal(a, score_corpus(docs, cfg, embeddings=vectors).scores, check_exact=True)


def test_merge_map_on_a_sample_is_the_mid_rank_map_in_sample_and_monotone_outside(sharded):
    rng = np.random.default_rng(0)
    scores = pd.DataFrame({"a": np.round(rng.normal(size=500), 2), "ref": rng.uniform(-1, 6, 500)})
    scores.loc[[3, 9], "a"] = np.nan
    cfg = MergeConfig(components=["a", "ref"], reference="ref")
    fitted = MergeMap.fit(scores, cfg)
    mapped, counts = fitted.apply(scores)
    expected = quantile_map(scores["a"].to_numpy(), np.clip(scores["ref"].to_numpy(), 0, 5))
    np.testing.assert_array_equal(mapped["a_0_5"].to_numpy()[np.isfinite(expected)], expected[np.isfinite(expected)])
    assert counts["nan_a"] == 2 and (mapped["a_0_5"].iloc[[3, 9]] == 0).all()  # floor policy
    new = np.linspace(-10, 10, 101)
    out = fitted.map("a", new)
    assert (np.diff(out) >= 0).all() and out.min() >= 0 and out.max() <= 5
    assert out[0] == 0 and out[-1] == 5  # below / above every sample value: the scale's ends
    # the sharded stage stores the map it applied (sorted sample values + reference)
    _, folder = sharded
    stored = MergeMap.load(folder / "fit" / "merge_map.npz")
    assert set(stored.samples) == {"fasttext_dclm", "wiki"} and (np.diff(stored.reference) >= 0).all()


def test_embeddings_not_aligned_with_the_documents_are_refused(docs, vectors, six, tmp_path):
    documents, _ = six
    cfg = scoring_config_from_dict(SMALL)
    five = write_shards(vectors, tmp_path / "five", 5, stage="embedding", aligned_with=documents.fingerprint)
    with pytest.raises(LineageError, match="not aligned with documents"):
        score_shards(documents, five, cfg, tmp_path / "a")
    # same layout, made from other documents (e.g. before a re-ingest)
    stale = write_shards(vectors, tmp_path / "stale", 6, stage="embedding", aligned_with="0123456789abcdef0123")
    with pytest.raises(LineageError, match="re-make it"):
        score_shards(documents, stale, cfg, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # refused before any work


def test_an_empty_shard_scores_to_an_empty_frame_with_every_column(sharded):
    from curation.scoring import apply_scoring
    from curation.scoring.sharded import load_fitted

    result, folder = sharded
    raters, merge = load_fitted(str(folder / "fit"))
    empty = pd.DataFrame({"id": pd.Series([], dtype=str), "text": pd.Series([], dtype=str)})
    scores, counts = apply_scoring(empty, np.zeros((0, 256), np.float32), scoring_config_from_dict(SMALL), raters, merge)
    assert len(scores) == 0 and list(scores.columns) == list(result.scores.read(result.scores.names[0]).columns)
    assert counts["fasttext_dclm/total"] == counts["edu/total"] == counts["books_importance/total"] == 0


def test_runs_fitting_side_by_side_keep_their_own_sample_passes(six, sharded, tmp_path):
    """Two runs with the same scoring key fit into one cache entry at once. Their per-shard passes must not
    share a work folder: one shared folder let one run delete the other's passes mid-read (found on two
    default jobs started together: FileNotFoundError on .fit.sample-passes/raters/edu.joblib). A live
    process's folder is left alone; a dead one's (a killed run) is removed."""
    import os
    import subprocess
    import sys

    from curation.shards import EngineConfig

    documents, embeddings = six
    folder = tmp_path / "stage"
    folder.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    try:
        live_work = folder / f".fit.sample-passes-{other.pid}"
        (live_work / "raters").mkdir(parents=True)
        (live_work / "raters" / "edu.joblib").write_bytes(b"the other run's rater")
        dead_work = folder / f".fit.sample-passes-{dead.stdout.strip()}"
        dead_work.mkdir()
        result = score_shards(documents, embeddings, scoring_config_from_dict(SMALL), folder,
                              EngineConfig(workers=2, progress=False))
        assert (live_work / "raters" / "edu.joblib").read_bytes() == b"the other run's rater"
        assert not dead_work.exists()
        assert sorted(p.name for p in folder.glob(".fit.sample-passes-*")) == [live_work.name]
        expected, _ = sharded
        for name in documents.names:
            pd.testing.assert_frame_equal(result.scores.read(name), expected.scores.read(name))
        # every shard lies wholly in the fit sample: the pool's sample pass scored it once, with every rater, and
        # the scoring pass only merged it; the bad-input counts are the same as scoring it apart
        assert result.metrics["fit/rows_scored_once"] == len(documents)
        assert expected.metrics["fit/rows_scored_once"] == 0
        counts = [k for k in expected.metrics if k.endswith(("/total", "/empty_text", "/nan_score", "/nan_quality"))]
        assert counts and {k: result.metrics[k] for k in counts} == {k: expected.metrics[k] for k in counts}
        assert not list(folder.glob(f".fit.sample-passes-{os.getpid()}"))  # its passes are removed after scoring
    finally:
        other.kill()
        other.wait()
