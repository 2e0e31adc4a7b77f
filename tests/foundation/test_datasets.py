"""The corpus reader (file / folder / glob; parquet / jsonl[.gz|.zst]) and atomic saves."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
import zstandard

from kedro.io import DatasetError

from curation.datasets import AtomicDataset, CorpusShardsDataset
from curation.data.ingest import ingest_corpus

@pytest.fixture(autouse=True)
def _staging(tmp_path):
    global STAGING
    STAGING = tmp_path / "staging"  # the per-run staging folder goes to tmp, not the project's data/


def ingest_documents(shards, params):
    """The ingest core the node calls, with its sharded outputs read back as whole frames."""
    result = ingest_corpus(shards, params, work_root=STAGING)
    return result.documents.to_frame(), result.rejected.to_frame(), result.metrics

DATA_PARAMS = {"id_column": "id", "text_column": "text", "max_chars": 1_000_000, "max_docs": None,
               "keep_columns": ["source"]}


def _write_jsonl(path: Path, rows: list[dict], raw_lines: list[bytes] = ()) -> None:
    payload = b"".join(json.dumps(r).encode() + b"\n" for r in rows) + b"".join(raw_lines)
    if path.suffix == ".zst":
        payload = zstandard.ZstdCompressor().compress(payload)
    elif path.suffix == ".gz":
        payload = gzip.compress(payload)
    path.write_bytes(payload)


def test_folder_of_parquet_ignores_other_files(corpus_sample, tmp_path):
    corpus_sample.iloc[:100].to_parquet(tmp_path / "a.parquet")
    corpus_sample.iloc[100:150].to_parquet(tmp_path / "b.parquet")
    (tmp_path / "stats.json").write_text("{}")
    shards = CorpusShardsDataset(path=str(tmp_path)).load()
    assert list(shards) == ["a.parquet", "b.parquet"]
    assert sum(len(load()) for load in shards.values()) == 150


def test_glob_and_single_file(corpus_sample, tmp_path):
    (tmp_path / "x" / "y").mkdir(parents=True)
    corpus_sample.iloc[:10].to_parquet(tmp_path / "x" / "y" / "part-0.parquet")
    corpus_sample.iloc[10:30].to_parquet(tmp_path / "x" / "part-1.parquet")
    globbed = CorpusShardsDataset(path=str(tmp_path / "x" / "*" / "part-*.parquet")).load()
    assert [len(f()) for f in globbed.values()] == [10]
    single = CorpusShardsDataset(path=str(tmp_path / "x" / "part-1.parquet")).load()
    assert [len(f()) for f in single.values()] == [20]


def test_a_folder_of_parquet_and_jsonl_is_read_whole(corpus_sample, tmp_path, caplog):
    """Issue #44: 50 documents as parquet in a subfolder and 50 as .jsonl; format auto read the parquet alone
    ("read 50 rows from 1 of 1 shards", exit 0). Now each file is read in its own format; a forced format reads
    its own files and says which it leaves out."""
    tmp_path = tmp_path / "corpus"  # beside the staging folder
    (tmp_path / "sub").mkdir(parents=True)
    corpus_sample.iloc[:50].to_parquet(tmp_path / "sub" / "half.parquet")
    rows = [{"id": i, "text": t} for i, t in zip(corpus_sample["id"][50:100], corpus_sample["text"][50:100])]
    _write_jsonl(tmp_path / "a.jsonl", rows[:30])
    _write_jsonl(tmp_path / "b.jsonl.gz", rows[30:])
    shards = CorpusShardsDataset(path=str(tmp_path)).load()
    assert list(shards) == ["a.jsonl", "b.jsonl.gz", "sub/half.parquet"]
    documents, _, metrics = ingest_documents(shards, DATA_PARAMS)
    assert metrics["rows_read"] == 100 and metrics["shards_read"] == 3
    assert sorted(documents["id"]) == sorted(corpus_sample["id"][:100])
    with caplog.at_level("WARNING", logger="curation.datasets.corpus"):
        parquet = CorpusShardsDataset(path=str(tmp_path), format="parquet").load()
    assert list(parquet) == ["sub/half.parquet"]
    assert "data.format=parquet: 2 file(s) of the other format" in caplog.text and "a.jsonl" in caplog.text
    assert list(CorpusShardsDataset(path=str(tmp_path), format="jsonl").load()) == ["a.jsonl", "b.jsonl.gz"]


def test_jsonl_zst_and_gz_with_invalid_utf8_line_counted(corpus_sample, tmp_path):
    rows = [{"id": i, "text": t} for i, t in zip(corpus_sample["id"][:5], corpus_sample["text"][:5])]
    _write_jsonl(tmp_path / "a.jsonl.zst", rows[:3], raw_lines=[b'{"id": "bad", "text": "caf\xe9 \xff"}\n', b'{"id": "cut", "te\n'])
    _write_jsonl(tmp_path / "b.jsonl.gz", rows[3:])
    shards = CorpusShardsDataset(path=str(tmp_path)).load()
    assert list(shards) == ["a.jsonl.zst", "b.jsonl.gz"]
    documents, rejected, metrics = ingest_documents(shards, DATA_PARAMS)
    assert list(documents["id"]) == [r["id"] for r in rows]
    assert metrics["dropped_invalid_utf8"] == 1 and metrics["dropped_invalid_json"] == 1
    assert metrics["rows_read"] == 7
    assert rejected.iloc[0]["id"] == "bad" and rejected.iloc[0]["source_file"] == "a.jsonl.zst"


def test_missing_path_and_no_shards_are_clear_errors(tmp_path):
    with pytest.raises(DatasetError, match="data.path does not exist"):
        CorpusShardsDataset(path=str(tmp_path / "nope")).load()
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(DatasetError, match="no parquet"):
        CorpusShardsDataset(path=str(tmp_path)).load()


def test_ingest_node_edge_cases(corpus_sample, tmp_path):
    """Empty text, duplicate ids across shards, a 5 MB document and max_docs, in one run."""
    good = corpus_sample.iloc[:20][["id", "text", "source"]]
    bad = pd.DataFrame({"id": ["e1", good["id"].iloc[0], "big"], "text": ["   ", "dup", "é" * 5_000_000],
                        "source": ["web"] * 3})
    good.to_parquet(tmp_path / "0.parquet")
    bad.to_parquet(tmp_path / "1.parquet")
    documents, rejected, metrics = ingest_documents(CorpusShardsDataset(path=str(tmp_path)).load(), DATA_PARAMS)
    assert len(documents) == 20
    assert metrics["dropped_empty_text"] == 1 and metrics["dropped_duplicate_id"] == 1
    assert metrics["dropped_too_long"] == 1 and metrics["rows_read"] == 23
    assert metrics["rows_kept"] + metrics["rows_dropped"] == metrics["rows_read"]
    assert dict(zip(rejected["id"], rejected["reason"]))["big"] == "too_long"

    capped, _, capped_metrics = ingest_documents(CorpusShardsDataset(path=str(tmp_path)).load(),
                                                 {**DATA_PARAMS, "max_docs": 7})
    assert list(capped["id"]) == list(good["id"][:7])
    assert capped_metrics["rows_read"] == 7 and capped_metrics["shards_read"] == 1


def test_missing_text_column_error_names_the_shard(tmp_path):
    pd.DataFrame({"id": ["a"], "body": ["x"]}).to_parquet(tmp_path / "shard-3.parquet")
    with pytest.raises(ValueError, match=r"shard-3\.parquet: required column 'text' is missing"):
        ingest_documents(CorpusShardsDataset(path=str(tmp_path)).load(), DATA_PARAMS)


class _Boom(Exception):
    pass


def test_atomic_save_never_leaves_a_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "out" / "table.parquet"
    dataset = AtomicDataset(filepath=str(target), dataset={"type": "pandas.ParquetDataset"})
    dataset.save(pd.DataFrame({"a": [1, 2]}))
    assert dataset.load()["a"].tolist() == [1, 2]

    from kedro_datasets.pandas import ParquetDataset

    def dying_save(self, data):  # a run killed half-way through writing
        Path(self._filepath).write_bytes(b"PAR1 half a file")
        raise _Boom

    monkeypatch.setattr(ParquetDataset, "save", dying_save)
    with pytest.raises(DatasetError) as failure:
        dataset.save(pd.DataFrame({"a": [3]}))
    assert isinstance(failure.value.__cause__, _Boom)
    assert sorted(p.name for p in target.parent.iterdir()) == ["table.parquet"]
    monkeypatch.undo()
    assert dataset.load()["a"].tolist() == [1, 2]


def test_fsspec_url_glob(corpus_sample):
    """Any fsspec URL works; memory:// stands in for s3:// or gs:// without a network."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for i, part in enumerate((corpus_sample.iloc[:40], corpus_sample.iloc[40:100])):
        with fs.open(f"/corpus-test/shard-{i}.parquet", "wb") as handle:
            part.to_parquet(handle)
    try:
        url = "memory://corpus-test/shard-*.parquet"
        shards = CorpusShardsDataset(path=url).load()
        assert len(shards) == 2
        # data.path, as a run passes it: a memory:// corpus is read in this process (workers would not see it)
        documents, _, metrics = ingest_documents(shards, {**DATA_PARAMS, "path": url})
        assert list(documents["id"]) == list(corpus_sample["id"][:100]) and metrics["rows_read"] == 100
    finally:
        fs.rm("/corpus-test", recursive=True)
