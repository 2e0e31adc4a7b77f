"""Sharded datasets: manifest, completion markers, aligned attributes, mmap'd arrays, Kedro publish."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from curation.datasets import ShardedDataset as KedroSharded
from curation.shards import ShardedDataset, ShardWriter, read_manifest, shard_names
from curation.shards.dedup import bucket_of, find_duplicates, partition_ids
from curation.shards.lineage import LineageError

from tests.shards.conftest import CORPUS


@pytest.fixture(scope="module")
def docs() -> pd.DataFrame:
    return pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[1], columns=["id", "text", "source"]).iloc[:900]


def _write(root, parts, kind="frame", **finalize):
    writer = ShardWriter(root, kind)
    names = shard_names(len(parts))
    for name, part in zip(names, parts):
        writer.write_stats(name, {"rows": len(part)})
        writer.mark_complete(writer.write(name, part))
    return writer.finalize(names, **finalize)


def test_manifest_records_shards_schema_inputs_and_summed_stats(docs, tmp_path):
    manifest = _write(tmp_path / "d", [docs.iloc[:400], docs.iloc[400:]], stage="ingest",
                      inputs={"raw_documents": "abc"}, config_digest="cfg", remake="curate pipeline=ingest")
    raw = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert [s["rows"] for s in raw["shards"]] == [400, 500] and raw["rows"] == 900
    assert raw["inputs"] == {"raw_documents": "abc"} and raw["config_digest"] == "cfg"
    assert raw["stats"] == {"rows": 900} and set(raw["schema"]) == {"id", "text", "source"}
    assert read_manifest(tmp_path / "d").fingerprint == manifest.fingerprint == raw["fingerprint"]
    reread = ShardedDataset(tmp_path / "d")
    pd.testing.assert_frame_equal(reread.to_frame(), docs.reset_index(drop=True), check_dtype=False)
    assert [len(f) for _, f in reread.iter_frames(columns=["id"])] == [400, 500]


def test_unfinished_shard_blocks_the_manifest(docs, tmp_path):
    writer = ShardWriter(tmp_path / "d")
    writer.write("part-00000", docs)  # data written, never marked complete (a killed run)
    with pytest.raises(RuntimeError, match="1 shard\\(s\\) not finished"):
        writer.finalize(["part-00000"], stage="x")
    with pytest.raises(FileNotFoundError, match="not a finished sharded dataset"):
        ShardedDataset(tmp_path / "d")


def test_embedding_shards_are_aligned_and_memory_mapped(docs, tmp_path):
    documents = _write(tmp_path / "docs", [docs.iloc[:400], docs.iloc[400:]], stage="ingest")
    rng = np.random.default_rng(0)
    emb = [rng.standard_normal((400, 16)).astype("float32"), rng.standard_normal((500, 16)).astype("float32")]
    _write(tmp_path / "emb", emb, kind="array", stage="embeddings", aligned_with=documents.fingerprint)
    embeddings = ShardedDataset(tmp_path / "emb")
    embeddings.check_aligned_with(ShardedDataset(tmp_path / "docs"), name="embeddings")
    first = embeddings.array("part-00000")
    assert isinstance(first, np.memmap) and not first.flags.writeable
    np.testing.assert_array_equal(first, emb[0])
    # Attributes of other documents (one row fewer in the second shard) are refused.
    _write(tmp_path / "emb_bad", [emb[0], emb[1][:-1]], kind="array", stage="embeddings")
    with pytest.raises(LineageError, match="not aligned with documents"):
        ShardedDataset(tmp_path / "emb_bad").check_aligned_with(ShardedDataset(tmp_path / "docs"), name="embeddings")


def test_kedro_dataset_saves_frames_as_shards_and_publishes_a_folder(docs, tmp_path):
    dataset = KedroSharded(path=str(tmp_path / "out" / "documents"), rows_per_shard=250, stage="test")
    dataset.save(docs)
    assert dataset.exists() and len(ShardedDataset(tmp_path / "out" / "documents").names) == 4
    pd.testing.assert_frame_equal(dataset.load(), docs.reset_index(drop=True), check_dtype=False)
    # Publishing a finished folder replaces the old dataset in one rename.
    _write(tmp_path / "staging" / "documents", [docs.iloc[:10]], stage="ingest")
    dataset.save(ShardedDataset(tmp_path / "staging" / "documents"))
    assert len(dataset.load()) == 10 and not (tmp_path / "staging").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["documents"]
    shards = KedroSharded(path=str(tmp_path / "out" / "documents"), load_as="shards").load()
    assert isinstance(shards, ShardedDataset) and len(shards) == 10


def test_hash_partitioned_dedup_matches_first_occurrence_in_stream_order(docs, tmp_path):
    ids = docs["id"].astype(str)
    shards = [ids.iloc[:300], pd.concat([ids.iloc[300:600], ids.iloc[[5, 7]]]), pd.concat([ids.iloc[[7, 301]], ids.iloc[600:]])]
    names = shard_names(3)
    for i, (name, part) in enumerate(zip(names, shards)):
        partition_ids(part.reset_index(drop=True), shard=name, shard_index=i, bucket_dir=tmp_path, num_buckets=8)
    drops = find_duplicates(tmp_path, names, 8)
    # In one pass over the stream with a set: shard 1 rows 300, 301 and shard 2 rows 0, 1 repeat earlier ids.
    assert {k: v.tolist() for k, v in drops.items()} == {1: [300, 301], 2: [0, 1]}
    assert (bucket_of(ids, 8) == bucket_of(ids.copy(), 8)).all() and bucket_of(ids, 8).max() < 8


def test_kedro_dataset_publishes_a_kept_folder_as_links_and_leaves_it(docs, tmp_path):
    """A result-cache entry (``keep=True``) stays intact for the next run; the published copy shares its files."""
    import os

    cached = tmp_path / "cache" / "scores-abc"
    _write(cached, [docs.iloc[:10], docs.iloc[10:25]], stage="scoring")
    dataset = KedroSharded(path=str(tmp_path / "out" / "scores"))
    dataset.save(ShardedDataset(cached, keep=True))
    assert len(dataset.load()) == 25 and (cached / "manifest.json").is_file()
    source = ShardedDataset(cached).shard_path("part-00001")
    published = ShardedDataset(tmp_path / "out" / "scores").shard_path("part-00001")
    assert os.stat(source).st_ino == os.stat(published).st_ino
    # Publishing again (a cache hit on the next run) replaces the old copy, the cache still intact.
    dataset.save(ShardedDataset(cached, keep=True))
    assert len(dataset.load()) == 25 and ShardedDataset(cached).manifest.rows == 25
