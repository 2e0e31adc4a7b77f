"""The local engine's worker pool (``data.workers``): the same bytes as one shard at a time in the
driver, an error that names its shard, a re-run that resumes after it."""

from __future__ import annotations

import hashlib
import os
import shutil
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.data.config import DataConfig
from curation.datasets import CorpusShardsDataset
from curation.shards import EngineConfig, ShardResult, ShardTask, ShardWriter, run_shards, shard_names
from curation.shards.executor import cpus_available, engine_from_data
from curation.data.ingest import ingest_shards
from curation.scoring.stages import signals_shard
from curation.data.textdedup import DedupSettings

from tests.shards.conftest import CONFIG, CORPUS

TWO = EngineConfig(workers=2)


def tasks(folder: Path) -> list[ShardTask]:
    return [ShardTask(k, v) for k, v in CorpusShardsDataset(path=str(folder)).load().items()]


def shard_bytes(work: Path) -> dict[str, str]:
    """sha256 of every shard file and completion marker under ``work`` (the per-shard stats hold
    seconds, so they are left out)."""
    return {str(p.relative_to(work)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(work.rglob("*")) if p.is_file() and p.parent.name in ("shards", "completions")}


@pytest.mark.slow  # ~12 s: ingest twice, once on a pool
def test_two_workers_write_the_same_bytes_as_the_in_driver_loop(twelve_shards, tmp_path):
    # ingest with exact + near-duplicate dedup: four per-shard outputs in pass 1, two in finish
    dedup = DedupSettings(decontaminate="off")
    one = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=tmp_path / "w1", dedup=dedup,
                        engine=EngineConfig(workers=1))
    two = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=tmp_path / "w2", dedup=dedup, engine=TWO)
    files = shard_bytes(tmp_path / "w1")
    assert len([f for f in files if f.startswith("documents/shards")]) == 12
    assert {f.split("/")[0] for f in files} >= {"validated", "kept_rows", "rejected_pass1", "signatures",
                                                 "documents", "rejected"}
    assert shard_bytes(tmp_path / "w2") == files
    assert two.documents.fingerprint == one.documents.fingerprint
    assert two.rejected.fingerprint == one.rejected.fingerprint
    assert two.metrics == one.metrics


def test_max_docs_with_two_workers_reads_two_shards_a_round_and_keeps_the_same_documents(twelve_shards, tmp_path):
    # with dedup: the LSH pair counts of the shards read past the cap are left out, as one a round does
    dedup = DedupSettings(decontaminate="off")
    one = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=tmp_path / "w1", max_docs=1100, dedup=dedup,
                        engine=EngineConfig(workers=1))
    two = ingest_shards(tasks(twelve_shards), CONFIG, work_dir=tmp_path / "w2", max_docs=1100, dedup=dedup,
                        engine=TWO)
    validated = [len(list((tmp_path / w / "validated" / "completions").iterdir())) for w in ("w1", "w2")]
    assert validated == [5, 6]  # two workers validated a shard past the cap (3 rounds of 2), then left it out
    assert two.documents.fingerprint == one.documents.fingerprint
    assert two.rejected.fingerprint == one.rejected.fingerprint
    assert two.metrics == one.metrics and one.metrics["rows_kept"] == 1100


class _TwoArgError(Exception):
    """An error that does not unpickle (its ``__init__`` needs two arguments, ``args`` holds one)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")


def _flaky(frame: pd.DataFrame, name: str, *, bad: str | None = None, die: bool = False) -> ShardResult:
    if name == bad:
        if die:
            os._exit(3)  # a worker that dies (as when killed or out of memory): no exception to send back
        raise ValueError("this shard's rows are bad")
    return signals_shard(frame, name)


def _unpicklable_error(frame: pd.DataFrame, name: str) -> ShardResult:
    raise _TwoArgError("key", "the message")


def test_an_error_that_does_not_unpickle_still_names_its_shard(tmp_path):
    with pytest.raises(RuntimeError, match=r"(?s)_TwoArgError: key: the message.*in shard part-0000"):
        run_shards(_unpicklable_error, _signal_tasks(2), {"signals": (tmp_path / "s", "frame")}, TWO)


def _signal_tasks(n: int) -> list[ShardTask]:
    docs = pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[2], columns=["id", "text"]).iloc[: 40 * n]
    return [ShardTask(name, docs.iloc[40 * i : 40 * (i + 1)].copy) for i, name in enumerate(shard_names(n))]


def _stats_mtimes(folder: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_mtime_ns for p in (folder / "stats").glob("*.json")}


@pytest.mark.parametrize("die", [False, True], ids=["raises", "dies"])
def test_a_failed_shard_is_named_and_a_rerun_runs_only_the_unfinished_shards(tmp_path, die):
    shards = _signal_tasks(5)
    out = {"signals": (tmp_path / "signals", "frame")}
    bad = shards[2].name
    if die:
        with pytest.raises(RuntimeError, match=f"worker process died .*{bad}"):
            run_shards(partial(_flaky, bad=bad, die=True), shards, out, TWO, desc="signals")
    else:
        with pytest.raises(ValueError, match="rows are bad") as info:
            run_shards(partial(_flaky, bad=bad), shards, out, TWO, desc="signals")
        assert any(f"in shard {bad}" in note for note in info.value.__notes__)  # printed with the trace
    writer = ShardWriter(tmp_path / "signals")
    finished = {t.name for t in shards if writer.is_complete(t.name)}
    # shard 2 is submitted only when shard 0 or 1 has ended; a worker that dies breaks the pool and takes the
    # other running shard with it, so which of 0 and 1 finished depends on timing (raised: both)
    assert bad not in finished and finished & {shards[0].name, shards[1].name}
    if not die:
        assert finished >= {shards[0].name, shards[1].name}  # running shards finish before the error propagates
    before = _stats_mtimes(tmp_path / "signals")
    assert set(before) == finished
    # what a writer killed mid-save leaves (a dying worker's pool takes the other running shard with it)
    stale = tmp_path / "signals" / "shards" / f".{bad}.parquet.tmp-0badf00d"
    stale.write_bytes(b"")

    stats = run_shards(partial(_flaky, bad=None), shards, out, TWO, desc="signals")  # fixed: re-run
    after = _stats_mtimes(tmp_path / "signals")
    assert {n: after[n] for n in finished} == before  # the finished shards were skipped
    assert set(after) == {t.name for t in shards} and [s["rows"] for s in stats] == [40] * 5
    assert not stale.exists()  # the re-run removed what the killed writers left
    clean = tmp_path / "clean"
    run_shards(signals_shard, shards, {"signals": (clean, "frame")}, EngineConfig(workers=1))
    assert shard_bytes(tmp_path / "signals") == shard_bytes(clean)


def test_an_error_in_the_driver_loop_names_its_shard_too(tmp_path):
    shards = _signal_tasks(3)
    with pytest.raises(ValueError) as info:
        run_shards(partial(_flaky, bad=shards[1].name), shards, {"signals": (tmp_path / "s", "frame")},
                   EngineConfig(workers=1))
    assert any(f"in shard {shards[1].name}" in note for note in info.value.__notes__)


def _threads(frame: pd.DataFrame, name: str) -> ShardResult:
    # what a worker sees: its share of the CPUs, for its own thread pools and nested process pools
    from threadpoolctl import threadpool_info

    blas = min((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"), default=-1)
    return ShardResult({"seen": np.array([cpus_available(), int(os.environ.get("OMP_NUM_THREADS", "0")),
                                          os.getpid(), blas])}, {})


def test_workers_run_in_other_processes_each_with_its_share_of_the_cpus(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    shards = [ShardTask(n, dict) for n in shard_names(4)]
    run_shards(_threads, shards, {"seen": (tmp_path / "seen", "array")}, TWO)
    seen = np.stack([np.load(ShardWriter(tmp_path / "seen", "array").shard_path(t.name)) for t in shards])
    share = max(1, cpus_available() // 2)
    assert (seen[:, 0] == share).all() and (seen[:, 1] == share).all() and (seen[:, 3] == share).all()
    assert os.getpid() not in set(seen[:, 2]) and len(set(seen[:, 2])) <= 2  # at most two worker processes


def test_data_workers_defaults_to_the_cpus_this_process_may_use():
    assert engine_from_data({}).workers == cpus_available() == len(os.sched_getaffinity(0))
    assert engine_from_data({"workers": 1}).workers == 1
    assert engine_from_data({"engine": "local", "workers": 3}, "inprocess").workers == 3
    assert EngineConfig().workers == 1  # a direct caller keeps the in-driver loop
    assert DataConfig().workers is None
    with pytest.raises(ValueError, match="workers"):
        DataConfig(workers=0)
    with pytest.raises(ValueError, match="workers"):
        engine_from_data({"workers": 0})


@pytest.mark.slow  # ~11 s: embedding and scoring, each twice, once on a pool
def test_embedding_and_scoring_shards_are_the_same_with_two_workers(corpus_sample, tmp_path):
    from curation.embedding import EmbedderConfig
    from curation.embedding.sharded import embed_shards
    from curation.scoring import scoring_config_from_dict
    from curation.scoring.sharded import score_shards
    from tests.scoring.conftest import write_shards

    docs = corpus_sample.iloc[::2].reset_index(drop=True)
    documents = write_shards(docs, tmp_path / "documents", 4)
    static = EmbedderConfig(backend="static", dim=256, pca_dims=256, max_seq_length=256, sort_by_length=False,
                            device="cpu", show_progress=False, num_workers=1)
    emb1, _ = embed_shards(documents, static, tmp_path / "emb1", EngineConfig(workers=1))
    emb2, _ = embed_shards(documents, static, tmp_path / "emb2", TWO)
    assert shard_bytes(tmp_path / "emb2") == shard_bytes(tmp_path / "emb1")
    cfg = scoring_config_from_dict({
        "training": {"source": "corpus"},
        "fasttext_dclm": {"bucket": 20000, "thread": 1, "quantize": False},
        "fasttext_ultrafineweb": {"bucket": 20000, "thread": 1, "min_count": 1, "quantize": False},
        "edu": {"max_per_rule": 16}})
    one = score_shards(documents, emb1, cfg, tmp_path / "s1", EngineConfig(workers=1))
    shutil.copytree(tmp_path / "s1" / "fit", tmp_path / "s2" / "fit")  # the fit is the driver's; not redone
    two = score_shards(documents, emb1, cfg, tmp_path / "s2", TWO)  # fastText raters loaded in each worker
    assert shard_bytes(tmp_path / "s2" / "scores") == shard_bytes(tmp_path / "s1" / "scores")
    assert two.scores.fingerprint == one.scores.fingerprint


def test_document_statistics_on_the_engine_equal_the_in_driver_ones(tmp_path):
    from curation.data.stats import document_statistics_shards
    from curation.shards import ShardedDataset

    docs = pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[1], columns=["id", "text", "source"]).iloc[:300]
    docs["category"] = pd.Series(["web", None, "books"] * 100, dtype="string")  # missing categories too
    docs.loc[docs.index[:7], "source"] = None
    writer = ShardWriter(tmp_path / "documents")
    names = shard_names(5)
    parts = np.array_split(np.arange(len(docs)), 4)
    for name, part in zip(names, parts[:2] + [parts[2][:0]] + parts[2:]):  # an empty shard too
        writer.mark_complete(writer.write(name, docs.iloc[part].reset_index(drop=True)))
    writer.finalize(names, stage="test")
    documents = ShardedDataset(tmp_path / "documents")
    before = document_statistics_shards(documents)  # in this process, shard after shard
    for engine in (EngineConfig(workers=1), TWO):
        after = document_statistics_shards(documents, engine)
        pd.testing.assert_frame_equal(after, before, check_exact=True)
        a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
        before.to_parquet(a, index=False)
        after.to_parquet(b, index=False)
        assert a.read_bytes() == b.read_bytes()  # the saved document_stats, byte for byte
    assert before["category"].isna().sum() == 100 and len(before) == 300


def test_a_ray_address_where_no_cluster_answers_is_one_line_naming_the_setting(tmp_path, monkeypatch):
    # issue #44: `data.ray_address=auto` without a cluster printed Ray's own hint (its `--address` flag)
    pytest.importorskip("ray")
    from curation.errors import user_message
    from curation.shards.executor import EngineConfig, RayClusterError, ray_session

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # where Ray looks for a cluster started on this machine: none
    with pytest.raises(RayClusterError) as err:
        with ray_session(EngineConfig(engine="ray", ray_address="auto")):
            pytest.fail("connected")
    message = user_message(err.value)
    assert message.startswith("data.ray_address='auto': no Ray cluster answered there (ConnectionError: ")
    assert "Fix: start one (`ray start --head` on the head node)" in message and "\n" not in message
