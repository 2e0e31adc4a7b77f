"""Ingest validation on shards: identical to one shard and to the whole-frame stream; resume; Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from curation.data import ValidationReport, validate_documents
from curation.datasets import CorpusShardsDataset
from curation.shards import EngineConfig, ShardTask
from curation.data.ingest import category, ingest_shards

from tests.shards.conftest import CONFIG

SRC = Path(__file__).resolve().parents[2] / "src"


def tasks(folder: Path) -> list[ShardTask]:
    return [ShardTask(k, v) for k, v in CorpusShardsDataset(path=str(folder)).load().items()]


def whole_frame_ingest(folder: Path, max_docs: int | None = None):
    """The whole-frame ingest as it was (one set of every id, pd.concat): the oracle."""
    seen: set[str] = set()
    kept_parts, rejected_parts, report, total, read = [], [], ValidationReport(), 0, 0
    for shard_id, load in CorpusShardsDataset(path=str(folder)).load().items():
        if max_docs is not None and total >= max_docs:
            break
        kept, rejected, shard_report = validate_documents(load(), CONFIG, source_name=shard_id, seen_ids=seen)
        if max_docs is not None and total + len(kept) > max_docs:
            surplus = total + len(kept) - max_docs
            kept = kept.iloc[: len(kept) - surplus]
            shard_report.rows_kept -= surplus
            shard_report.rows_read -= surplus
        kept_parts.append(kept)
        rejected_parts.append(rejected)
        report, total, read = report + shard_report, total + len(kept), read + 1
    documents = pd.concat(kept_parts, ignore_index=True)
    if "extra" in documents.columns:
        documents["category"] = category(documents["extra"])
    return documents, pd.concat(rejected_parts, ignore_index=True), {**report.as_metrics(), "shards_read": read}


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False)


def test_twelve_shards_give_the_one_shard_and_whole_frame_result(twelve_shards, one_shard, tmp_path):
    many = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=tmp_path / "w12")
    one = ingest_shards(tasks(one_shard), CONFIG, work_dir=tmp_path / "w1")
    docs, rejected, metrics = whole_frame_ingest(twelve_shards)
    assert len(many.documents.names) == 12 and len(one.documents.names) == 1
    _same(many.documents.to_frame(), one.documents.to_frame())
    _same(many.documents.to_frame(), docs)
    _same(many.rejected.to_frame(), rejected)
    counts = ("shards_total", "files_read", "files_total")  # how the input was cut, not what it holds
    assert {k: v for k, v in many.metrics.items() if k not in counts} == metrics
    assert many.metrics["dropped_duplicate_id"] == 30 and many.metrics["dropped_empty_text"] == 4
    assert many.metrics["dropped_missing_id"] == 2 and many.metrics["dropped_too_long"] == 1
    assert {k: v for k, v in many.metrics.items() if k not in ("shards_read", *counts)} == \
           {k: v for k, v in one.metrics.items() if k not in ("shards_read", *counts)}
    # The manifest's summed per-shard stats are the metrics; row counts add up to the documents.
    manifest = many.documents.manifest
    assert manifest.rows == metrics["rows_kept"] == len(docs)
    assert manifest.stats["dropped_duplicate_id"] == 30 and manifest.stage == "ingest"
    assert {"id", "text", "category"} <= set(manifest.schema)


@pytest.mark.parametrize("max_docs", [250, 1000, 2990])
def test_max_docs_reads_shards_in_order_like_the_stream(twelve_shards, tmp_path, max_docs):
    result = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=tmp_path / "w", max_docs=max_docs)
    docs, rejected, metrics = whole_frame_ingest(twelve_shards, max_docs)
    _same(result.documents.to_frame(), docs)
    _same(result.rejected.to_frame(), rejected)
    assert {k: v for k, v in result.metrics.items() if k not in ("shards_total", "files_read", "files_total")} == metrics
    assert result.metrics["files_read"] == result.metrics["shards_read"] and result.metrics["files_total"] == 12
    assert len(result.documents) == max_docs


KILLER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from curation.datasets import CorpusShardsDataset
    from curation.shards import ShardTask, store
    from curation.data.ingest import ingest_shards
    from curation.data import ValidationConfig

    original = store.ShardWriter.mark_complete
    def mark_then_die(self, info):
        # Killed after shard part-00005's data file is written, before its marker: the worst moment.
        if info.name == "part-00005" and self.root.name == "validated":
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, info)
    store.ShardWriter.mark_complete = mark_then_die
    raw = CorpusShardsDataset(path=sys.argv[1]).load()
    ingest_shards([ShardTask(k, v) for k, v in raw.items()], ValidationConfig(), work_dir=sys.argv[2])
""")


@pytest.mark.slow  # an ingest subprocess, killed, then resumed
def test_a_run_killed_mid_shard_resumes_skips_finished_shards_and_gives_the_same_output(twelve_shards, tmp_path):
    work = tmp_path / "w"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", KILLER, str(twelve_shards), str(work)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    validated = work / "validated"
    finished = sorted(p.name for p in (validated / "completions").iterdir())
    assert finished == [f"part-{i:05d}" for i in range(5)]  # shards 0-4 done; 5 written but unmarked
    assert (validated / "shards" / "part-00005.parquet").exists()
    assert not (work / "documents" / "manifest.json").exists()
    before = {n: (validated / "stats" / f"{n}.json").stat().st_mtime_ns for n in finished}

    resumed = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=work)
    assert {n: (validated / "stats" / f"{n}.json").stat().st_mtime_ns for n in finished} == before  # skipped
    clean = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=tmp_path / "clean")
    assert resumed.documents.fingerprint == clean.documents.fingerprint
    assert resumed.rejected.fingerprint == clean.rejected.fingerprint
    assert resumed.metrics == clean.metrics


@pytest.mark.slow  # starts a Ray cluster
def test_ray_engine_writes_the_same_shards_as_the_local_engine(twelve_shards, tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        on_ray = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=tmp_path / "ray",
                               engine=EngineConfig(engine="ray"), max_docs=None)
    finally:
        ray.shutdown()
    local = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=tmp_path / "local")
    # Shard for shard, the same bytes' digests: the manifests' fingerprints agree.
    assert [s.digest for s in on_ray.documents.manifest.shards] == [s.digest for s in local.documents.manifest.shards]
    assert on_ray.rejected.fingerprint == local.rejected.fingerprint
    assert on_ray.metrics == local.metrics


def test_shards_from_files_with_different_columns_share_one_schema(tmp_path):
    # issue #44: parquet with source/url/extra beside JSON Lines with id and text only made shards of two schemas;
    # reading the documents as one dataset then failed (ArrowInvalid: No match for FieldRef.Name(source))
    import pyarrow.dataset as ds

    from curation.data.stats import document_statistics_shards
    from tests.conftest import CORPUS_SHARDS

    corpus = pd.read_parquet(CORPUS_SHARDS[0]).head(20)
    folder = tmp_path / "mixed"
    folder.mkdir()
    corpus.head(10).to_parquet(folder / "a.parquet")
    (folder / "b.jsonl").write_text("".join(json.dumps({"id": r.id, "text": r.text}) + "\n"
                                            for r in corpus.iloc[10:].itertuples()))
    result = ingest_shards(tasks(folder), CONFIG, work_dir=tmp_path / "w")
    schemas = [ds.dataset(str(path)).schema for path in sorted(result.documents.root.glob("shards/*.parquet"))]
    assert len(schemas) == 2 and schemas[0].names == schemas[1].names
    assert {"source", "url", "category"} <= set(schemas[0].names)
    documents = result.documents.to_frame()
    assert documents["source"].notna().sum() == 10 and documents["source"].isna().sum() == 10
    stats = document_statistics_shards(result.documents)
    assert len(stats) == 20 and (stats["source"] == "unknown").sum() == 10
