"""pretrain -> evaluate, verification and a table2_tiny sweep in real KedroSessions, on a real selection.

One isolated project per module: the default job (ingest, scoring, pruning, selection) runs once on 60
real documents; the LM pipelines then run on its outputs with a micro model (1 layer, 32 wide, 512-token
vocabulary, 32-token sequences) and 5 items of 1-2 tasks, so each pipeline takes seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest

from curation.config_loader import compose_config
from curation.hydra_app import run_kedro
from tests.conftest import CORPUS_DIR, job_in_new_project

pytestmark = pytest.mark.slow  # the default job, then pretrain/evaluate/verification/table2 Kedro jobs: minutes

UPSTREAM = [
    f"data.path={CORPUS_DIR}", "data.max_docs=60",
    "embedding.show_progress=false",
    "selection=datamask", "selection.steps=20", "selection.history_every=5", "selection.group_size=16",
    "budget.keep_ratio=0.3",
]
MICRO = [
    "pretrain.tokenizer.vocab_size=512", "pretrain.tokenizer.max_docs=50",
    "pretrain.model.vocab_size=512", "pretrain.model.max_seq_len=32", "pretrain.model.n_layer=1",
    "pretrain.model.d_model=32", "pretrain.model.n_head=2", "pretrain.model.n_kv_head=1", "pretrain.model.d_ff=64",
    "pretrain.train.seq_len=32", "pretrain.train.batch_size=4", "pretrain.train.max_steps=6",
    "pretrain.train.val_batches=1", "pretrain.train.num_threads=1",
    "eval.limit=5", "eval.tasks=[piqa,arc_easy]", "eval.num_threads=1",
]


@pytest.fixture(scope="module")
def lm_project(tmp_path_factory):
    """An isolated project holding the default job's outputs for 60 real documents (18 selected)."""
    with job_in_new_project(tmp_path_factory, "lm", UPSTREAM) as root:
        yield root


def _run(project: Path, *overrides: str) -> None:
    run_kedro(compose_config(project / "conf", [*UPSTREAM, *MICRO, *overrides]), project_path=project)


def _runs(project: Path, experiment: str = "curation") -> pd.DataFrame:
    """The runs, each metric also by its name without the stage (``metrics.train_steps`` beside
    ``metrics.pretrain/train_steps``)."""
    from curation.tracking.metric_names import with_flat_columns

    mlflow.set_tracking_uri(f"sqlite:///{project}/mlruns/mlflow.db")
    return with_flat_columns(mlflow.search_runs(experiment_names=[experiment], order_by=["start_time ASC"]))


def _history(run_id: str, key: str) -> list[tuple[int, float]]:
    """The series of ``key``, logged as ``<stage>/<key>``."""
    from curation.tracking.metric_names import history_key

    client = mlflow.MlflowClient()
    name = history_key(key, client.get_run(run_id).data.metrics)
    assert "/" in name, name  # logged under its stage
    return [(m.step, m.value) for m in client.get_metric_history(run_id, name)]


def test_pretrain_on_the_selection_then_evaluate_the_latest_checkpoint(lm_project):
    project = lm_project
    _run(project, "pipeline=pretrain")
    run = _runs(project).iloc[-1]
    assert run["status"] == "FINISHED" and run["tags.kedro.pipelines"] == "pretrain"
    assert [s for s, _ in _history(run["run_id"], "loss")] == [1, 2, 3, 4, 5, 6]  # per-step loss series
    assert run["metrics.train_steps"] == 6 and run["metrics.pretrain_cache_hit"] == 0
    assert run["metrics.train_tokens_per_s"] > 0 and run["metrics.train_tokens"] == 6 * 4 * 32

    # the tokenize node: every selected document packed, one EOS after each
    selected = pd.read_parquet(project / "data/07_model_output/default/selected_documents/shards")
    index = json.loads((project / "data/05_model_input/default/lm_tokens/index.json").read_text())
    tokens = np.fromfile(project / "data/05_model_input/default/lm_tokens/tokens.bin", dtype=index["dtype"])
    assert index["n_docs"] == len(selected) == int((tokens == index["eos_id"]).sum()) and tokens[-1] == index["eos_id"]
    versions = sorted((project / "data/06_models/default/lm_checkpoint").iterdir())
    assert len(versions) == 1 and {p.name for p in (versions[0] / "lm_checkpoint").iterdir()} == {
        "model.pt", "config.json", "tokenizer.json"}

    # same selection and config: the cached run is reused; another seed trains a second checkpoint
    _run(project, "pipeline=pretrain")
    assert _runs(project).iloc[-1]["metrics.pretrain_cache_hit"] == 1
    _run(project, "pipeline=pretrain", "pretrain.train.seed=1")
    versions = sorted((project / "data/06_models/default/lm_checkpoint").iterdir())
    assert len(versions) == 3

    _run(project, "pipeline=evaluate")
    run = _runs(project).iloc[-1]
    assert run["tags.kedro.pipelines"] == "evaluate"
    table = pd.read_csv(project / "data/08_reporting/default/eval_tasks.csv")
    assert set(table["task"]) == {"piqa", "arc_easy"} and (table["n_items"] == 5).all()
    # acc_norm over 5 items is k/5; the table holds the logged values; reasoning is the mean of the two
    # tasks' primary metric (acc_norm for both) and the average the mean over abilities (reasoning alone)
    piqa, arc = run["metrics.piqa_acc_norm"], run["metrics.arc_easy_acc_norm"]
    for value in (piqa, arc):
        assert value * 5 == pytest.approx(round(value * 5)) and 0 <= round(value * 5) <= 5
    assert table.set_index("task")["value"].to_dict() == pytest.approx({"piqa": piqa, "arc_easy": arc})
    assert set(table["metric"]) == {"acc_norm"}
    assert run["metrics.reasoning"] == pytest.approx((piqa + arc) / 2)
    assert run["metrics.average"] == pytest.approx(run["metrics.reasoning"])  # both tasks are reasoning tasks

    # evaluate read the newest checkpoint (seed 1): its weights differ from the seed-0 model's
    from kedro.io import Version

    from curation.datasets import LMCheckpointDataset
    from curation.cache import model_digest

    path = str(project / "data/06_models/default/lm_checkpoint")
    latest = LMCheckpointDataset(filepath=path, version=Version(None, None)).load()
    newest = LMCheckpointDataset(filepath=path, version=Version(versions[-1].name, None)).load()
    oldest = LMCheckpointDataset(filepath=path, version=Version(versions[0].name, None)).load()
    assert model_digest(latest.model) == model_digest(newest.model) != model_digest(oldest.model)


def test_verification_compares_two_selections_against_the_default_only_annealing(lm_project):
    project = lm_project
    _run(project, "pipeline=verification", "verification.base_tokens=1024", "verification.anneal_steps=4",
         "verification.ratios=[0.5]", "verification.tasks=[piqa]", "verification.limit=5",
         "verification.default_docs=40")
    run = _runs(project).iloc[-1]
    assert run["status"] == "FINISHED" and run["tags.kedro.pipelines"] == "verification"
    table = pd.read_csv(project / "data/08_reporting/default/verification_table8.csv")
    assert list(table["dataset"]) == ["base", "default_only", "raw", "selection"]
    assert table["ratio"].iloc[1:].eq(0.5).all() and table["ratio"].isna().iloc[0]
    for _, row in table.iloc[2:].iterrows():  # delta = candidate - default-only annealing, in points
        assert row["delta_piqa"] == pytest.approx(row["piqa"] - table.iloc[1]["piqa"])
    assert run["metrics.anneal_steps"] == 4
    assert {"metrics.raw_r0.50_delta_average", "metrics.selection_r0.50_delta_average"} <= set(run.index)
    assert [s for s, _ in _history(run["run_id"], "base_loss")] == [1, 2, 3, 4, 5, 6, 7, 8]  # 1024 / (4 x 32)
    assert len(_history(run["run_id"], "selection_r0.50_loss")) == 4
    candidates = pd.read_parquet(project / "data/05_model_input/default/verification_candidates.parquet")
    selected = pd.read_parquet(project / "data/07_model_output/default/selected_documents/shards")
    assert set(candidates.loc[candidates["candidate"] == "selection", "id"]) == set(selected["id"])
    assert (candidates["candidate"] == "default_mix").sum() == 40
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run["run_id"], "tables")}
    assert "tables/verification_table8.csv" in artifacts  # named as on disk


@pytest.mark.optin  # opt-in (suite time, 2026-11-28): ~65 s in CI; decide_smoke and the plain-corpus Table 2 cell run its cells
def test_table2_sweep_writes_the_table_from_mlflow_runs(lm_project):
    project = lm_project
    curate = Path(sys.executable).parent / "curate"
    done = subprocess.run(
        [str(curate), "experiment=table2_tiny", *UPSTREAM, *MICRO, "table2.corpus=raw,edu", "pretrain.train.seed=0",
         "pretrain.train.max_steps=null", "pretrain.train.max_tokens=512", "eval.limits.triviaqa=null",
         "eval.limits.nq_open=null"],
        cwd=project, env={**os.environ, "CURATION_PROJECT_ROOT": str(project)}, capture_output=True, text=True,
        timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = _runs(project, "table2_tiny")
    cells = runs[runs["tags.kedro.pipelines"] == "table2"]
    assert sorted(cells["params.table2.corpus"]) == ["edu", "raw"] and (cells["status"] == "FINISHED").all()
    assert (cells["metrics.train_tokens"] == 512).all()  # the same token budget for every corpus
    edu = pd.read_parquet(project / "data/04_feature/default/scores/shards").nlargest(18, "edu")
    assert cells["metrics.corpus_docs"].eq(18).all()
    assert cells.loc[cells["params.table2.corpus"] == "edu", "metrics.corpus_score_mean"].iloc[0] == pytest.approx(
        edu["edu"].mean())
    report = (project / "data/08_reporting/default/table2_tiny/report.md").read_text()
    assert "| raw | FineWeb |" in report and "| edu | FineWeb-Edu |" in report and "noise" in report
    table = pd.read_csv(project / "data/08_reporting/default/table2_tiny/table.csv")
    assert list(table["corpus"]) == ["raw", "edu", "chance"]
    assert {"reasoning", "reasoning_sd", "average", "average_sd", "delta_average", "win"} <= set(table.columns)
