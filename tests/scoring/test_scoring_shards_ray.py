"""engine=ray (data.engine / scoring.engine) on a local 2-CPU Ray instance: the per-shard embedding
and scoring functions run as Ray tasks and write the same shards as the local engine."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.embedding import EmbedderConfig
from curation.embedding.sharded import embed_shards
from curation.scoring import scoring_config_from_dict
from curation.scoring.sharded import engine_of, score_shards
from curation.shards import EngineConfig
from tests.scoring.conftest import write_shards

SMALL = {
    "training": {"source": "corpus"},  # trained on these rows' own labels (reference: test_scoring_reference.py)
    "fasttext_dclm": {"bucket": 20000, "thread": 1, "quantize": False},
    "fasttext_ultrafineweb": {"bucket": 20000, "thread": 1, "min_count": 1, "quantize": False},
    "edu": {"max_per_rule": 16},
}
STATIC = EmbedderConfig(backend="static", dim=256, pca_dims=256, max_seq_length=256, sort_by_length=False,
                        device="cpu", show_progress=False, num_workers=1)


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow  # starts a Ray cluster
@pytest.mark.optin  # opt-in (suite time, 2026-11-28): ~180 s in CI; the local engine's equivalence stays
def test_ray_tasks_write_the_same_embeddings_and_scores_as_the_local_engine(local_ray, corpus_sample, tmp_path):
    docs = corpus_sample.iloc[::2].reset_index(drop=True)  # ~450 real rows, every category
    documents = write_shards(docs, tmp_path / "documents", 4)
    ray_engine = engine_of("ray", {"engine": "local"})  # scoring.engine overrides data.engine
    assert ray_engine.engine == "ray" and engine_of("inprocess", {"engine": "ray"}).engine == "local"
    emb_ray, _ = embed_shards(documents, STATIC, tmp_path / "emb_ray", ray_engine)
    emb_local, _ = embed_shards(documents, STATIC, tmp_path / "emb_local", EngineConfig())
    assert emb_ray.fingerprint == emb_local.fingerprint  # shard digests: byte-identical arrays
    cfg = scoring_config_from_dict(SMALL)
    on_ray = score_shards(documents, emb_ray, cfg, tmp_path / "scores_ray", ray_engine)
    local = score_shards(documents, emb_local, cfg, tmp_path / "scores_local", EngineConfig())
    pd.testing.assert_frame_equal(on_ray.scores.to_frame(), local.scores.to_frame(), check_exact=True)
    for key in ("fasttext_dclm/total", "fasttext_ultrafineweb/empty_text", "edu/nan_score", "redpajama/empty_text",
                "wikipedia_importance/nan_score", "merge/nan_quality"):
        assert on_ray.metrics[key] == local.metrics[key], key
    assert on_ray.metrics["fasttext_dclm/total"] == len(docs)
    assert np.isfinite(on_ray.scores.to_frame()["quality"]).all()
