"""Embeddings on shards (issue 14): 600 real documents cut into 6 shards give the vectors of one
whole-corpus ``encode``; the output is aligned with the documents; a killed run resumes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.embedding import EmbedderConfig, make_embedder
from curation.embedding.sharded import embed_shards, shared_embedder
from curation.shards import ShardedDataset, ShardWriter, shard_names
from tests.embedding.conftest import CORPUS

STATIC = EmbedderConfig(backend="static", dim=256, pca_dims=256, max_seq_length=256, batch_size=1024,
                        sort_by_length=False, device="cpu", show_progress=False, num_workers=1)


def _documents(tmp_path, frame: pd.DataFrame, n_shards: int) -> ShardedDataset:
    writer = ShardWriter(tmp_path / f"documents{n_shards}", "frame")
    names = shard_names(n_shards)
    for name, rows in zip(names, np.array_split(np.arange(len(frame)), n_shards)):
        writer.mark_complete(writer.write(name, frame.iloc[rows]))
    writer.finalize(names, stage="ingest")
    return ShardedDataset(writer.root)


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    path = CORPUS / "corpus-0001.parquet"
    if not path.exists():
        pytest.skip(f"corpus not found under {CORPUS}")
    return pd.read_parquet(path, columns=["id", "text"]).iloc[:600].reset_index(drop=True)


def test_six_shards_equal_one_whole_corpus_encode(frame, tmp_path):
    documents = _documents(tmp_path, frame, 6)
    vectors, hit = embed_shards(documents, STATIC, tmp_path / "embeddings")
    assert not hit and vectors.names == documents.names
    assert [s.rows for s in vectors.manifest.shards] == [s.rows for s in documents.manifest.shards]
    assert vectors.manifest.aligned_with == documents.fingerprint
    assert vectors.manifest.inputs == {"documents": documents.fingerprint} and vectors.manifest.config_digest
    assert vectors.manifest.stats["embedding_docs"] == len(frame)  # counts add up across shards
    whole = make_embedder(STATIC).encode(frame["text"].tolist()).embeddings
    sharded = np.concatenate([a for _, a in vectors.iter_arrays()])
    assert sharded.dtype == np.float32 and sharded.shape == (600, 256)
    np.testing.assert_array_equal(sharded, whole)  # the static model: bit-identical
    vectors.check_aligned_with(documents)
    # the embedder is built once per process, not once per shard
    assert shared_embedder(STATIC) is shared_embedder(EmbedderConfig(**vars(STATIC)))


def test_a_killed_run_resumes_and_an_unchanged_one_is_a_hit(frame, tmp_path):
    documents = _documents(tmp_path, frame, 6)
    folder = tmp_path / "embeddings"
    first, _ = embed_shards(documents, STATIC, folder)
    expected = first.fingerprint
    again, hit = embed_shards(documents, STATIC, folder)
    assert hit and again.fingerprint == expected
    # simulate a kill: no manifest, shard 2 without its marker, shard 4 lost
    kept = (folder / "shards" / "part-00000.npy").stat().st_mtime_ns
    (folder / "manifest.json").unlink()
    (folder / "completions" / "part-00002").unlink()
    (folder / "shards" / "part-00004.npy").unlink()
    (folder / "completions" / "part-00004").unlink()
    resumed, hit = embed_shards(documents, STATIC, folder)
    assert not hit and resumed.fingerprint == expected
    assert (folder / "shards" / "part-00000.npy").stat().st_mtime_ns == kept  # a finished shard is not redone


def test_minilm_shards_match_one_encode_within_float_rounding(frame, tmp_path):
    config = EmbedderConfig(max_seq_length=128, max_chars=1024, batch_size=32, show_progress=False, num_threads=1)
    small = frame.iloc[:120].reset_index(drop=True)
    documents = _documents(tmp_path, small, 4)
    vectors, _ = embed_shards(documents, config, tmp_path / "embeddings")
    whole = make_embedder(config).encode(small["text"].tolist()).embeddings
    sharded = np.concatenate([a for _, a in vectors.iter_arrays()])
    # batches of other neighbours pad differently; padding is masked, so only rounding moves
    np.testing.assert_allclose(sharded, whole, rtol=0, atol=2e-6)
