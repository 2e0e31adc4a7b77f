"""DataMask's progress while it runs (issue #53 item 3): steps and objective to the callback, the console
and the pipeline's MLflow run, in this process and from block worker processes."""

from __future__ import annotations

import json
import logging

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch

from curation.pipelines.selection.pipeline import create_pipeline
from curation.selection.config import DataMaskConfig
from curation.selection.datamask import run_block
from curation.selection.progress import StepBar
from curation.selection.sharded import BlockSteps, BlockTask, run_datamask_blocks
from curation.shards import ShardedDataset
from tests.kedro_nodes import run_node
from tests.sharded_inputs import write_array, write_frame
from tests.shards.conftest import CORPUS

DATAMASK = {"method": "datamask", "steps": 30, "group_size": 8, "history_every": 5, "batch_ratio": 0.5,
            "checkpoint_every": 10, "lam": 0.3}


class Recorder:
    """A progress callback with the optional ``values`` method."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.values_seen: list[tuple[int, int, dict]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))

    def values(self, done: int, total: int, values) -> None:
        self.values_seen.append((done, total, dict(values)))


def test_run_block_reports_every_step_and_the_objective_of_every_history_row():
    gen = torch.Generator().manual_seed(0)
    emb, q = torch.randn(60, 8, generator=gen), torch.rand(60, generator=gen, dtype=torch.float64) * 15
    cfg = DataMaskConfig(steps=20, group_size=8, history_every=5, batch_ratio=1.0)
    recorder = Recorder()
    result = run_block(emb, q, 10, cfg, seed=0, progress=recorder)
    assert recorder.calls == [(i, 20) for i in range(1, 21)]
    rows = result.history[result.history["mask"] == "topk"]
    assert [d for d, _, _ in recorder.values_seen] == rows["step"].tolist() == [0, 5, 10, 15, 20]
    assert [v["joint"] for _, _, v in recorder.values_seen] == rows["joint"].tolist()
    assert set(recorder.values_seen[0][2]) == {"joint", "quality", "diversity"}
    run_block(emb, q, 10, cfg, seed=0, progress=lambda done, total: None)  # a plain function still works


def test_step_bar_logs_a_line_every_5_percent_with_the_objective(caplog):
    sunk = []
    bar = StepBar("selection (datamask)", sink=lambda step, values: sunk.append((step, values)), bar=False)
    with caplog.at_level(logging.INFO, logger="curation.selection.progress"), bar:
        for done in range(0, 101):
            if done % 10 == 0:
                bar.values(done, 100, {"joint": done / 100})
            bar(done, 100)
        bar(100, 100)  # a repeated last report is not logged twice
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 21 and lines[0].startswith("selection (datamask): 0/100 steps (0%)")
    assert lines[-1] == "selection (datamask): 100/100 steps (100%), joint 1"
    assert sunk[-1] == (100, {"joint": 1.0}) and len(sunk) == 11


def test_block_steps_sums_the_blocks_progress_files_and_averages_their_objective(tmp_path):
    tasks = [BlockTask(i, 5, "unused", str(tmp_path), {}, 0) for i in range(2)]
    recorder = Recorder()
    steps = BlockSteps(tasks, 100, recorder)

    def write(block, step, joint, values_step):
        tasks[block].paths()["progress"].write_text(json.dumps(
            {"step": step, "steps": 100, "values": {"joint": joint}, "values_step": values_step}))

    steps.poll()  # no file yet: nothing done
    assert recorder.calls == [(0, 200)] and recorder.values_seen == []
    write(0, 40, 0.5, 40)
    write(1, 12, 0.1, 10)
    steps.poll()
    assert recorder.calls[-1] == (52, 200)
    assert recorder.values_seen[-1][:2] == (52, 200) and recorder.values_seen[-1][2] == {"joint": pytest.approx(0.3)}
    seen = len(recorder.values_seen)
    write(1, 13, 0.1, 10)  # a step, no new history row: the count moves, the objective is not sent again
    steps.poll()
    assert recorder.calls[-1] == (53, 200) and len(recorder.values_seen) == seen
    tasks[1].paths()["progress"].write_text("{\"step\": 9")  # a torn file (never written so; read next time)
    steps.poll()
    assert recorder.calls[-1] == (53, 200)


@pytest.fixture(scope="module")
def candidates(tmp_path_factory):
    """400 real documents with random 8-d embeddings and 0-15 quality, as the pruning stage leaves them."""
    from curation.pruning import PruningConfig, prune_shards

    root = tmp_path_factory.mktemp("progress")
    docs = pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[0], columns=["id", "text"]).iloc[:400]
    rng = np.random.default_rng(0)
    cuts = [np.arange(0, 150), np.arange(150, 400)]
    documents = write_frame(docs, root / "documents", cuts, "ingest")
    fp = documents.fingerprint
    scores = write_frame(pd.DataFrame({"id": docs["id"], "quality": rng.uniform(0, 15, 400)}), root / "scores", cuts,
                         "scoring", inputs={"documents": fp}, aligned_with=fp)
    embeddings = write_array(rng.standard_normal((400, 8)).astype("float32"), root / "embeddings", cuts, "scoring",
                             inputs={"documents": fp}, aligned_with=fp)
    pruned = prune_shards(scores, embeddings, PruningConfig(), root / "pruned")
    return documents, pruned.scores, pruned.embeddings


def _metric(run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in
            sorted(mlflow.MlflowClient().get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))]


@pytest.fixture
def mlflow_run(tmp_path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    with mlflow.start_run() as run:
        yield run.info.run_id
    mlflow.set_tracking_uri(None)


def test_the_selection_node_logs_datamask_steps_and_objective_to_mlflow(candidates, mlflow_run, tmp_path):
    """The selection node in the pipeline's MLflow run: one block, in this process (the default job's case)."""
    documents, pruned_scores, pruned_embeddings = candidates
    out = run_node(create_pipeline, "select_documents_node",
                   {"pruned_scores@shards": pruned_scores, "pruned_embeddings@shards": pruned_embeddings,
                    "documents@shards": documents},
                   {"selection": DATAMASK, "budget": {"keep_ratio": 0.1}, "run": {"seed": 0},
                    "data": {"engine": "local"}, "cache": {"dir": str(tmp_path / "cache"), "enabled": True}})
    history = out["selection_history"]
    rows = history[history["mask"] == "topk"]
    logged = _metric(mlflow_run, "selection/datamask_joint")
    assert [s for s, _ in logged] == rows["step"].tolist() == list(range(0, 31, 5))
    assert [v for _, v in logged] == pytest.approx(rows["joint"].tolist())
    assert [s for s, _ in _metric(mlflow_run, "selection/datamask_diversity")] == list(range(0, 31, 5))


@pytest.mark.slow  # two spawned block processes (interpreter start and torch import each)
def test_blocks_in_worker_processes_report_steps_and_objective_to_mlflow(candidates, mlflow_run, tmp_path):
    from curation.tracking.live_metrics import LiveMetrics

    _, pruned_scores, pruned_embeddings = candidates
    n = len(pruned_scores)
    quality = pruned_scores.to_frame()["quality"].to_numpy(dtype="float64")
    metrics = LiveMetrics("selection/datamask_")
    with StepBar("selection (datamask)", sink=metrics, close_sink=metrics.flush) as bar:
        _, history, info = run_datamask_blocks(quality, np.arange(n), pruned_embeddings, 20,
                                               {**DATAMASK, "block_size": n // 2 + 1, "block_workers": 2}, 0,
                                               tmp_path / "work", in_process=False, progress=bar)
    assert info["n_blocks"] == 2 and bar.done == bar.total == 60
    final = history[(history["mask"] == "topk") & (history["step"] == 30)]["joint"]
    logged = _metric(mlflow_run, "selection/datamask_joint")
    # the blocks' files hold their latest row: the last value is the mean of both blocks' last rows
    assert logged[-1] == (60, pytest.approx(final.mean()))
    assert [s for s, _ in logged] == sorted(s for s, _ in logged)
    for block in range(2):
        state = json.loads((tmp_path / "work" / "blocks" / f"block_{block:05d}.progress.json").read_text())
        assert state["step"] == state["steps"] == 30 and state["values_step"] == 30


def test_a_corpus_pick_logs_its_steps_and_objective(caplog):
    """decide's picks (select_corpus) show DataMask's steps and objective without a callback of their own."""
    from curation.selection.corpus import CorpusSpec, select_corpus

    rng = np.random.default_rng(1)
    scores = pd.DataFrame({"id": [f"d{i}" for i in range(80)], "quality": rng.uniform(0, 15, 80)})
    embeddings = rng.standard_normal((80, 8)).astype("float32")
    spec = CorpusSpec(method="datamask", config={"steps": 20, "history_every": 5, "group_size": 8})
    with caplog.at_level(logging.INFO, logger="curation.selection.corpus"):
        ids, _ = select_corpus(spec, scores=scores, embeddings=embeddings, pruned_scores=scores,
                               pruned_embeddings=embeddings, n_select=10, seed=0)
    lines = [r.getMessage() for r in caplog.records if r.name == "curation.selection.corpus"]
    assert len(ids) == 10 and lines[-1].startswith("pick datamask (raw pool): 20/20 steps (100%), joint ")
    assert len(lines) == 20  # every 5% of the steps: each of the 20 steps here
