"""Selection on a sharded pruned corpus (issue #14 item 5): DataMask blocks as independent tasks, streaming
top-k / random, scale limits of the in-memory methods, selected documents as shards, lineage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.pruning import PruningConfig, prune_shards
from curation.selection import select
from curation.selection.corpus import run_selection, run_selection_shards
from curation.selection.sharded import ScaleLimitError
from curation.shards.lineage import LineageError
from tests.sharded_inputs import sharded_inputs, write_frame

DATAMASK = {"method": "datamask", "steps": 30, "group_size": 16, "history_every": 10, "batch_ratio": 0.2,
            "checkpoint_every": 5, "lam": 0.3}
BUDGET = {"keep_ratio": 0.1, "docs": None, "ratio_of": "corpus", "candidates": None}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("selection_inputs")
    return root, sharded_inputs(root, 6)


@pytest.fixture(scope="module")
def pruned_inputs(inputs):
    return inputs[1][1], inputs[1][2]


@pytest.fixture(scope="module")
def pruned(inputs):
    root, (documents, scores, embeddings, _) = inputs
    out = prune_shards(scores, embeddings, PruningConfig(), root / "pruned")
    return documents, out.scores, out.embeddings


def _frames(documents, pruned_scores, pruned_embeddings):
    return (pruned_scores.to_frame(), np.concatenate([a for _, a in pruned_embeddings.iter_arrays()]),
            documents.to_frame())


def _in_order(documents_frame: pd.DataFrame, ids) -> pd.DataFrame:
    """The selected rows in document order, with the reference-token count every selected document carries."""
    from curation.data.tokens import count_tokens

    chosen = documents_frame[documents_frame["id"].isin(set(ids))].reset_index(drop=True)
    chosen["n_tokens"] = count_tokens(chosen["text"].tolist())
    return chosen


@pytest.mark.slow  # a DataMask block in a subprocess
def test_one_datamask_block_in_its_own_process_equals_datamask_in_process(pruned, tmp_path):
    documents, scores, embeddings = pruned
    frame, vectors, docs = _frames(documents, scores, embeddings)
    run = run_selection_shards(scores, embeddings, documents, DATAMASK, BUDGET, 3, tmp_path / "w",
                               in_process_blocks=False)  # spawned (one block alone runs in-process by default)
    expected = select("datamask", quality=frame["quality"].to_numpy(), embeddings=vectors,
                      budget=int(run.metrics["budget_docs"]),
                      config={k: v for k, v in DATAMASK.items() if k != "method"}, seed=3)
    assert run.metrics["info_n_blocks"] == 1 and run.metrics["budget_docs"] == 120
    assert run.selected_ids["id"].tolist() == frame["id"].iloc[expected.indices].tolist()
    pd.testing.assert_frame_equal(run.history.drop(columns="wall_time_s"),
                                  expected.history.drop(columns="wall_time_s"))
    # the selected corpus: per documents shard, the selected rows in document order
    assert run.selected_documents.names == documents.names
    got = run.selected_documents.to_frame()
    assert got.equals(_in_order(docs, run.selected_ids["id"]))
    assert run.selected_documents.manifest.inputs["documents"] == documents.fingerprint
    # same inputs and config: read back from the work folder
    again = run_selection_shards(scores, embeddings, documents, DATAMASK, BUDGET, 3, tmp_path / "w")
    assert again.metrics["selection_cache_hit"] == 1 and again.selected_ids.equals(run.selected_ids)


@pytest.mark.parametrize("diversity", ["fl", "disf"])
def test_block_tasks_equal_datamask_in_process_for_fl_on_unit_rows_and_disf_on_raw_rows(pruned, tmp_path, diversity):
    # fl: the block file holds normalised rows and the objective keeps no copy (unit_rows);
    # disf standardises the raw features, which the block file then holds
    documents, scores, embeddings = pruned
    frame, vectors, _ = _frames(documents, scores, embeddings)
    config = {**DATAMASK, "diversity": diversity, "steps": 12}
    run = run_selection_shards(scores, embeddings, documents, config, BUDGET, 3, tmp_path / "w", in_process_blocks=True)
    expected = select("datamask", quality=frame["quality"].to_numpy(), embeddings=vectors,
                      budget=int(run.metrics["budget_docs"]),
                      config={k: v for k, v in config.items() if k != "method"}, seed=3)
    assert run.selected_ids["id"].tolist() == frame["id"].iloc[expected.indices].tolist()
    pd.testing.assert_frame_equal(run.history.drop(columns="wall_time_s"),
                                  expected.history.drop(columns="wall_time_s"))


SCRIPT = textwrap.dedent("""
    import os, sys, threading
    from pathlib import Path
    import curation.selection.sharded as sharded
    from curation.selection.corpus import run_selection_shards
    from curation.shards import ShardedDataset
    docs, scores, emb, work = sys.argv[1:5]
    run_block_task = sharded.run_block_task

    def hold_after_the_first_block(task):  # tell the test, then wait here to be killed
        run_block_task(task)
        Path(work, "first_block_finished").write_text("")
        threading.Event().wait(600)  # bounded: never outlive a test that died before killing it
        os._exit(3)

    sharded.run_block_task = hold_after_the_first_block
    config = {config!r}
    run_selection_shards(ShardedDataset(scores), ShardedDataset(emb), ShardedDataset(docs), config, {budget!r}, 5,
                         work, in_process_blocks=True)
""")


@pytest.mark.slow  # a whole blocked selection, then a subprocess killed and resumed
def test_several_blocks_resume_after_a_kill_and_equal_blocked_datamask_in_process(pruned, tmp_path):
    documents, scores, embeddings = pruned
    frame, vectors, _ = _frames(documents, scores, embeddings)
    config = {**DATAMASK, "block_size": 300, "steps": 60, "checkpoint_every": 20}
    whole = run_selection_shards(scores, embeddings, documents, config, BUDGET, 5, tmp_path / "whole",
                                 in_process_blocks=True)
    assert whole.metrics["info_n_blocks"] == 4
    expected = select("datamask", quality=frame["quality"].to_numpy(), embeddings=vectors,
                      budget=int(whole.metrics["budget_docs"]),
                      config={k: v for k, v in config.items() if k != "method"}, seed=5)
    assert whole.selected_ids["id"].tolist() == frame["id"].iloc[expected.indices].tolist()

    # a run killed (SIGKILL) once its first block has finished, then re-run
    work = tmp_path / "killed"
    script = SCRIPT.format(config=config, budget=BUDGET)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", script, str(documents.root), str(scores.root),
                             str(embeddings.root), str(work)], env=env)
    first = work / "blocks" / "block_00000.done.json"
    held = work / "first_block_finished"  # the child writes it after block 0, then waits to be killed
    deadline = time.time() + 600  # a guard against a hung child only
    while not held.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.exists() and not (work / "result.json").exists()
    stamp = first.stat().st_mtime_ns
    resumed = run_selection_shards(scores, embeddings, documents, config, BUDGET, 5, work, in_process_blocks=True)
    assert first.stat().st_mtime_ns == stamp  # the finished block was not redone
    assert resumed.metrics["info_blocks_run"] < 4
    assert resumed.selected_ids.equals(whole.selected_ids)
    assert resumed.selected_documents.fingerprint == whole.selected_documents.fingerprint


@pytest.mark.parametrize("method", ["topk_quality", "random"])
@pytest.mark.parametrize("candidates", [None, 500])
def test_streaming_topk_and_random_equal_the_in_memory_selection(pruned, tmp_path, method, candidates):
    documents, scores, embeddings = pruned
    frame, vectors, docs = _frames(documents, scores, embeddings)
    budget = {**BUDGET, "candidates": candidates}
    run = run_selection_shards(scores, embeddings, documents, {"method": method}, budget, 11, tmp_path / "w")
    expected = run_selection(frame, vectors, docs, {"method": method}, budget, 11)
    assert frame["quality"].duplicated().sum() > 0  # ties at the cut are exercised
    pd.testing.assert_frame_equal(run.selected_ids, expected.selected_ids)
    assert run.selected_documents.to_frame().equals(expected.selected_documents)


@pytest.mark.parametrize("method", ["topk_quality", "random", "datamask", "greedy"])
def test_a_token_budget_on_shards_lands_within_one_percent_and_every_document_carries_n_tokens(pruned, tmp_path,
                                                                                              method):
    from curation.data.tokens import count_tokens

    documents, scores, embeddings = pruned
    selection = {**DATAMASK, "checkpoint_every": 0} if method == "datamask" else {"method": method}
    budget = {**BUDGET, "token_ratio": 0.1}
    run = run_selection_shards(scores, embeddings, documents, selection, budget, 11, tmp_path / "w",
                               in_process_blocks=True)
    chosen = run.selected_documents.to_frame()
    corpus_tokens = int(count_tokens(documents.to_frame()["text"].tolist()).sum())
    assert run.metrics["budget_tokens"] == round(0.1 * corpus_tokens)
    assert chosen["n_tokens"].tolist() == count_tokens(chosen["text"].tolist()).tolist()
    assert abs(chosen["n_tokens"].sum() / run.metrics["budget_tokens"] - 1) <= 0.01
    assert run.metrics["selected_tokens"] == chosen["n_tokens"].sum()
    if method in ("topk_quality", "random"):  # the streaming pick is the in-memory one
        frame, vectors, docs = _frames(documents, scores, embeddings)
        expected = run_selection(frame, vectors, docs, selection, budget, 11)
        pd.testing.assert_frame_equal(run.selected_ids, expected.selected_ids)


def test_greedy_refuses_past_its_limit_and_runs_on_a_subsample_below_it(pruned, tmp_path):
    documents, scores, embeddings = pruned
    frame, vectors, docs = _frames(documents, scores, embeddings)
    greedy = {"method": "greedy", "max_items": 400}
    with pytest.raises(ScaleLimitError, match=r"limit is 400 items.*has 1,1\d\d.*datamask.*topk_quality.*random"
                                              r".*budget.candidates"):
        run_selection_shards(scores, embeddings, documents, greedy, BUDGET, 0, tmp_path / "refused")
    budget = {**BUDGET, "candidates": 300}
    run = run_selection_shards(scores, embeddings, documents, greedy, budget, 0, tmp_path / "w")
    expected = run_selection(frame, vectors, docs, greedy, budget, 0)
    pd.testing.assert_frame_equal(run.selected_ids, expected.selected_ids)


def test_a_pruned_corpus_of_other_documents_is_refused(tmp_path):
    """Issue #14's case: ingest 400, score + prune, ingest 250, run the selection: a clear error."""
    documents, scores, embeddings, (docs, _, _) = sharded_inputs(tmp_path / "v1", 3, n=400)
    out = prune_shards(scores, embeddings, PruningConfig(), tmp_path / "pruned")
    reingested = write_frame(docs.iloc[:250], tmp_path / "v2" / "documents",
                             [np.arange(0, 100), np.arange(100, 250)], "ingest")
    with pytest.raises(LineageError, match=r"pruned_scores was made from documents .* but the current documents "
                                           r"is .*stale.*curate pipeline=scoring\+pruning"):
        run_selection_shards(out.scores, out.embeddings, reingested, DATAMASK, BUDGET, 0, tmp_path / "w")


@pytest.mark.slow  # starts a Ray cluster
@pytest.mark.optin  # opt-in (suite time, 2026-11-28): ~120 s in CI
def test_ray_equals_local_for_pruning_blocks_and_selected_documents(pruned, pruned_inputs, tmp_path):
    pytest.importorskip("ray")
    import ray

    from curation.shards import EngineConfig

    documents, scores, embeddings = pruned
    config = {**DATAMASK, "block_size": 600, "checkpoint_every": 0}
    local = run_selection_shards(scores, embeddings, documents, config, BUDGET, 2, tmp_path / "local",
                                 in_process_blocks=True)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        remote = run_selection_shards(scores, embeddings, documents, config, BUDGET, 2, tmp_path / "ray",
                                      engine=EngineConfig(engine="ray"))
        raw_scores, raw_embeddings = pruned_inputs
        cut = PruningConfig(mode="bottom_pct", bottom_pct=45.0)
        ray_pruned = prune_shards(raw_scores, raw_embeddings, cut, tmp_path / "pr", engine=EngineConfig(engine="ray"))
    finally:
        ray.shutdown()
    local_pruned = prune_shards(raw_scores, raw_embeddings, cut, tmp_path / "pl")
    assert ray_pruned.scores.fingerprint == local_pruned.scores.fingerprint
    assert ray_pruned.embeddings.fingerprint == local_pruned.embeddings.fingerprint
    assert ray_pruned.report == local_pruned.report
    assert local.metrics["info_n_blocks"] == 2
    assert remote.selected_ids.equals(local.selected_ids)
    assert remote.selected_documents.fingerprint == local.selected_documents.fingerprint


def test_nodes_prune_select_publish_and_describe(inputs, tmp_path):
    """The pruning and selection nodes on sharded inputs (through their pipelines): cached stage folders,
    published through the sharded catalog dataset, read back as a trainer's frame."""
    from curation.datasets.sharded import ShardedDataset as CatalogShards
    from curation.pipelines.pruning.pipeline import create_pipeline as pruning_pipeline
    from curation.pipelines.selection.pipeline import create_pipeline as selection_pipeline
    from tests.kedro_nodes import run_node

    _, (documents, scores, embeddings, _) = inputs
    cache = {"dir": str(tmp_path / "cache"), "enabled": True}
    run, data = {"seed": 1, "namespace": "default"}, {"engine": "local"}
    pruning = {"mode": "bottom_pct", "bottom_pct": 45.0, "threshold": 4.0, "score_column": "quality",
               "nan_policy": "drop"}

    def prune():
        return run_node(pruning_pipeline, "prune_documents_node",
                        {"scores@shards": scores, "embeddings@shards": embeddings},
                        {"pruning": pruning, "data": data, "cache": cache, "run": run})

    out = prune()
    metrics = out["pruning_metrics"]
    assert metrics["pruning_cache_hit"] == 0 and metrics["kept"] + metrics["dropped_low_quality"] + 4 == 1200
    assert prune()["pruning_metrics"]["pruning_cache_hit"] == 1
    published = {}
    for name in ("pruned_scores", "pruned_embeddings"):
        CatalogShards(path=str(tmp_path / "data" / name)).save(out[f"{name}@shards"])
        published[name] = CatalogShards(path=str(tmp_path / "data" / name), load_as="shards").load()
    assert (out["pruned_scores@shards"].root / "manifest.json").is_file()  # the cache entry stays
    selection = {**DATAMASK, "checkpoint_every": 0}  # one block: one spawned process
    params = {"selection": selection, "budget": BUDGET, "run": run, "data": data, "cache": cache}
    sel = run_node(selection_pipeline, "select_documents_node",
                   {"pruned_scores@shards": published["pruned_scores"],
                    "pruned_embeddings@shards": published["pruned_embeddings"], "documents@shards": documents},
                   params)
    ids, run_metrics = sel["selected_ids"], sel["selection_run_metrics"]
    assert run_metrics["budget_docs"] == 120 and run_metrics["info_n_blocks"] == 1 and len(ids) == 120
    CatalogShards(path=str(tmp_path / "data" / "selected_documents")).save(sel["selected_documents@shards"])
    frame = CatalogShards(path=str(tmp_path / "data" / "selected_documents"), load_as="frame").load()
    docs = documents.to_frame()
    assert frame.equals(_in_order(docs, ids["id"]))  # a trainer's view: the selected rows in document order
    words = docs["text"].str.split().str.len()
    doc_stats = pd.DataFrame({"id": docs["id"], "n_words": words, "source": "corpus"})
    diag = run_node(selection_pipeline, "describe_selection_node",
                    {"selected_ids": ids, "pruned_scores@shards": published["pruned_scores"],
                     "pruned_embeddings@shards": published["pruned_embeddings"], "document_stats": doc_stats,
                     "selection_history": sel["selection_history"]},
                    {"selection": selection, "budget": BUDGET, "run": run})["selection_metrics"]
    assert diag["selected_diagnosed_sample"] == 0
    assert diag["selected_diagnosed_candidates"] == len(published["pruned_scores"])
    assert diag["selected_size"] == 120


def test_gpu_placement_of_block_tasks_and_ray_tasks():
    import torch

    from curation.selection.sharded import block_device
    from curation.shards.executor import gpus_per_task

    # one block per GPU: a bare cuda spreads blocks over the GPUs, an explicit index or cpu stays
    assert [str(block_device("cuda", b, 4)) for b in range(5)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0"]
    assert block_device("cuda", 3, 1) == torch.device("cuda")  # one visible GPU (a Ray task): as it is
    assert block_device("cuda:2", 3, 4) == torch.device("cuda", 2)
    assert block_device("cpu", 3, 4) == torch.device("cpu")
    # Ray: "auto" reserves one GPU per task only on a cluster that has GPUs
    assert gpus_per_task("auto", {"CPU": 2.0}) == 0.0
    assert gpus_per_task("auto", {"CPU": 64.0, "GPU": 8.0}) == 1.0
    assert gpus_per_task(0.5, {"GPU": 8.0}) == 0.5
    with pytest.raises(ValueError, match="ray_num_gpus"):
        gpus_per_task(-1, {})


def test_the_diagnosis_sample_is_all_candidates_or_a_seeded_sorted_subset():
    from curation.selection.sharded import diagnosis_sample

    pool = np.arange(10, 60, dtype=np.int64)
    same, sampled = diagnosis_sample(pool, seed=0, limit=50)
    assert not sampled and same is pool
    a, sampled = diagnosis_sample(pool, seed=3, limit=20)
    b, _ = diagnosis_sample(pool, seed=3, limit=20)
    c, _ = diagnosis_sample(pool, seed=4, limit=20)
    assert sampled and len(a) == len(set(a)) == 20 and set(a) <= set(pool)
    assert np.all(np.diff(a) > 0) and np.array_equal(a, b) and not np.array_equal(a, c)
