"""The reference raters (scoring.training.source=reference, the default): trained once on the bundled corpus,
shared by content, applied to a corpus of id + text; the human eval split stays held out."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.embedding.artifacts import spec_digest
from curation.scoring import ScoringConfig, scoring_config_from_dict
from curation.scoring.embedding_raters import build_edu_annotations, wiki_training_config
from curation.scoring.reference import (fasttext_spec, heads_spec, load_reference_corpus, reference_eval_rows,
                                        shared_model_root)
from curation.scoring.run import fit_raters, score_corpus
from curation.scoring.training_sets import build_training_set
from tests.scoring.conftest import CORPUS

REPO = Path(__file__).resolve().parents[2]


def _default_embedding():
    """The embedding config `curate` runs with by default (so the reference heads are the ones it uses)."""
    from curation.config_loader import compose_config
    from curation.configuration import parse_dataclass
    from curation.embedding import EmbedderConfig

    node = compose_config(REPO / "conf")["embedding"]
    return parse_dataclass(EmbedderConfig, {**node, "show_progress": False}, path="embedding")


def test_the_held_out_human_labels_never_enter_a_reference_training_set():
    cfg = ScoringConfig()
    ref = load_reference_corpus(cfg.training.reference_path)
    held_out = set(reference_eval_rows(cfg)["id"])
    assert len(held_out) == 242 and ref.loc[ref["id"].isin(held_out), "quality_label"].notna().all()
    fasttext = build_training_set(ref, cfg.training)
    wiki = build_training_set(ref, wiki_training_config(cfg.training))
    edu, _ = build_edu_annotations(ref, cfg.edu, cfg.training)
    trained = set(fasttext.positive_ids + fasttext.negative_ids + wiki.positive_ids + wiki.negative_ids)
    trained |= set(ref["id"].to_numpy()[edu["row"].to_numpy(dtype=int)])
    assert fasttext.counts["human_train"] > 0 and not trained & held_out


def test_a_reference_rater_is_named_by_what_it_is_made_from():
    cfg = ScoringConfig()
    digest = spec_digest(fasttext_spec("fasttext_dclm", cfg))
    # how training runs does not change the model; its recipe and training set do
    same = replace(cfg, fasttext_dclm=replace(cfg.fasttext_dclm, nan_retries=9, isolate_training=False))
    assert spec_digest(fasttext_spec("fasttext_dclm", same)) == digest
    for changed in (replace(cfg, fasttext_dclm=replace(cfg.fasttext_dclm, bucket=1000)),
                    replace(cfg, fasttext_dclm=replace(cfg.fasttext_dclm, quantize=False)),
                    replace(cfg, training=replace(cfg.training, seed=1))):
        assert spec_digest(fasttext_spec("fasttext_dclm", changed)) != digest
    embedding = _default_embedding()
    assert spec_digest(heads_spec(cfg, embedding)) != spec_digest(heads_spec(cfg, replace(embedding, max_chars=100)))
    assert spec_digest(fasttext_spec("fasttext_dclm", cfg))  # the reference files are hashed: it exists
    assert fasttext_spec("fasttext_dclm", cfg)["source"]["reference_corpus"].keys() == {
        p.name for p in CORPUS.glob("*.parquet")}


def test_training_on_a_corpus_without_labels_says_which_columns_and_the_way_out():
    plain = pd.DataFrame({"id": ["a", "b"], "text": ["one document", "another one"]})
    cfg = scoring_config_from_dict({"raters": ["fasttext_dclm"], "training": {"source": "corpus"}})
    with pytest.raises(ValueError, match=r"lack column\(s\) \['extra \(or category\)', 'quality_label'\].*"
                                         r"source=reference"):
        fit_raters(plain, None, cfg)
    nulls = plain.assign(extra=None, quality_label=np.nan)
    with pytest.raises(ValueError, match=r"0 positives and 0 negatives.*source=reference"):
        fit_raters(nulls, None, cfg)
    with pytest.raises(ValueError, match="training.source"):
        scoring_config_from_dict({"training": {"source": "mine"}})


@pytest.fixture(scope="module")
def plain_scored():
    """200 bundled rows as id + text only, scored twice with the default config (reference raters)."""
    from curation.embedding import make_embedder

    rows = pd.read_parquet(sorted(CORPUS.glob("corpus-*.parquet"))[2]).head(200)
    plain = rows[["text", "id"]].reset_index(drop=True)
    embedder = make_embedder(_default_embedding())
    embeddings = embedder.encode(plain["text"].tolist()).embeddings
    return plain, [score_corpus(plain, ScoringConfig(), embeddings=embeddings, embedder=embedder) for _ in range(2)]


def test_a_plain_corpus_is_scored_by_the_shared_reference_raters_the_same_every_time(plain_scored):
    plain, (first, second) = plain_scored
    scores = first.scores
    assert list(scores["id"]) == list(plain["id"]) and scores["quality"].between(0, 15).all()
    for col in ("fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki", "books_importance"):
        assert scores[col].notna().all(), col
    pd.testing.assert_frame_equal(scores, second.scores)  # nothing is trained in the run: same input, same output
    m = first.metrics
    assert m["training/source_reference"] == 1.0 and m["roc_auc/n_eval"] == 242  # the reference's held-out rows
    assert m["roc_auc/fasttext_dclm"] > 0.6 and m["roc_auc/quality"] > 0.6
    assert m["reference/fasttext_dclm/counts/positives"] == m["reference/fasttext_dclm/counts/negatives"] > 5000
    shared = shared_model_root().resolve()
    for name in ("fasttext_dclm", "fasttext_ultrafineweb"):
        model = Path(first.raters[name].cfg.pretrained_path).resolve()
        assert model.parent.parent == shared and model.parent.name.startswith(f"ref-{name}-")
        assert model.stat().st_size < 100 * 2**20  # quantized


@pytest.mark.slow  # ~10 s per case: a worker pool started for the fit
@pytest.mark.parametrize("sampled", [False, True], ids=["whole-shards", "sampled-with-a-dsir-component"])
def test_the_fit_on_a_worker_pool_equals_the_fit_in_the_driver(plain_scored, tmp_path, sampled):
    """DSIR's raw counts and the merge components computed per shard on two workers, in one pass
    (``SamplePasses``), give the fit the driver computes alone: the same merge map, DSIR models and
    scores, bit for bit. Sampled: each shard only partly in the fit sample, and a DSIR column among the
    merge components (made from the n-grams the pass kept, once DSIR is fitted)."""
    from dataclasses import replace

    from curation.embedding import make_embedder
    from curation.scoring.persistence import load_raters
    from curation.scoring.sharded import fit_on_sample
    from curation.shards import EngineConfig
    from tests.scoring.conftest import write_shards

    plain, (first, _) = plain_scored
    embedder = make_embedder(_default_embedding())
    vectors = embedder.encode(plain["text"].tolist()).embeddings
    documents = write_shards(plain, tmp_path / "documents", 4)
    embeddings = write_shards(vectors, tmp_path / "embeddings", 4, stage="embedding", aligned_with=documents.fingerprint)
    cfg = ScoringConfig()
    if sampled:
        cfg = replace(cfg, fit_sample_docs=120, merge=replace(cfg.merge, components=["fasttext_dclm", "edu",
                                                                                     "books_importance"]))
    fits = {}
    for workers in (1, 2):
        fit_dir = tmp_path / f"fit-w{workers}"
        metrics = fit_on_sample(documents, embeddings, cfg, fit_dir, embedder=embedder,
                                engine=EngineConfig(workers=workers))
        fits[workers] = (metrics, fit_dir)
        assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # the passes' work folder is gone
    (m1, d1), (m2, d2) = fits[1], fits[2]
    assert {k: v for k, v in m1.items() if "seconds" not in k} == {k: v for k, v in m2.items() if "seconds" not in k}
    with np.load(d1 / "merge_map.npz") as a, np.load(d2 / "merge_map.npz") as b:
        assert set(a.files) == set(b.files) and all(np.array_equal(a[f], b[f]) for f in a.files)
    r1, r2 = load_raters(d1 / "raters"), load_raters(d2 / "raters")
    for name in [n for n in r1 if n.endswith("_importance")]:
        assert np.array_equal(r1[name].log_diff, r2[name].log_diff), name
    assert any(n.endswith("_importance") for n in r1)  # DSIR's raw side came from the pool
    assert (m2["fit/sample_docs"] < len(plain)) == sampled and "merge/map_seconds" in m2


@pytest.mark.slow  # ~20 s: two scorings, one on a worker pool
def test_scoring_on_a_worker_pool_scores_each_document_once_with_the_same_result(plain_scored, tmp_path):
    """On two workers every shard lies in the fit sample: the sample pass scores it with every rater, reading the
    DSIR features the raw-count pass kept, and the scoring pass only merges. Same scores and counts, bit for bit,
    as one process that scores the sample for the merge and every document again."""
    from curation.embedding import make_embedder
    from curation.scoring.sharded import score_shards
    from curation.shards import EngineConfig
    from tests.scoring.conftest import write_shards

    plain, _ = plain_scored
    embedder = make_embedder(_default_embedding())
    vectors = embedder.encode(plain["text"].tolist()).embeddings
    documents = write_shards(plain, tmp_path / "documents", 4)
    embeddings = write_shards(vectors, tmp_path / "embeddings", 4, stage="embedding", aligned_with=documents.fingerprint)
    results = {workers: score_shards(documents, embeddings, ScoringConfig(), tmp_path / f"stage-w{workers}",
                                     EngineConfig(workers=workers, progress=False), embedder=embedder)
               for workers in (1, 2)}
    one, two = results[1], results[2]
    for name in documents.names:
        pd.testing.assert_frame_equal(one.scores.read(name), two.scores.read(name))
    assert two.metrics["fit/rows_scored_once"] == two.metrics["fit/dsir_rows_hashed_once"] == len(plain)
    assert one.metrics["fit/rows_scored_once"] == 0 and "fit/dsir_rows_hashed_once" not in one.metrics
    counts = [k for k in one.metrics if k.endswith(("/total", "/empty_text", "/nan_score", "/nan_quality"))]
    assert counts and {k: two.metrics[k] for k in counts} == {k: one.metrics[k] for k in counts}
