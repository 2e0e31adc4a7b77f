"""ingest -> scoring -> pruning -> selection in real KedroSessions on 250 real documents."""

from __future__ import annotations

import re

import mlflow
import numpy as np
import pandas as pd
import pytest

from curation.config_loader import compose_config
from curation.hydra_app import run_kedro
from tests.conftest import CORPUS_DIR, DEFAULT_JOB_250

pytestmark = pytest.mark.slow  # whole Kedro jobs and a `curate -m` sweep: ~3 min on 2 busy cores

# Small but real. The scoring config is the default: the raters that need labels are the reference ones
# (trained once on the bundled corpus, shared by every test project), so no rater is trained here.
FAST = DEFAULT_JOB_250  # the session's default job (tests/conftest.py), shared with the reports test


def _runs(project) -> pd.DataFrame:
    """The project's runs, each metric also by its name without the stage (``metrics.kept`` beside
    ``metrics.pruning/kept``: :func:`curation.tracking.metric_names.with_flat_columns`)."""
    from curation.tracking.metric_names import with_flat_columns

    mlflow.set_tracking_uri(f"sqlite:///{project}/mlruns/mlflow.db")
    return with_flat_columns(mlflow.search_runs(experiment_names=["curation"], order_by=["start_time ASC"]))


def _catalog(project):
    from kedro.framework.session import KedroSession

    session = KedroSession.create(project_path=project, runtime_params={"data": {"path": str(CORPUS_DIR)}})
    return session.load_context().catalog


def test_default_job_then_cached_rerun_and_a_selection_sweep(default_job_250, monkeypatch):
    project = default_job_250  # the default job (__default__: all four pipelines) ran there, once per session
    catalog = _catalog(project)
    documents = catalog.load("documents@frame")
    scores = catalog.load("scores@frame")
    embeddings = np.asarray(catalog.load("embeddings@frame"))
    assert list(scores["id"]) == list(documents["id"]) and embeddings.shape == (250, 256)  # embedding=static
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-3)
    assert scores["quality"].between(0, 15).all()
    for rater in ("fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki", "doc_word_count"):
        assert rater in scores.columns

    pruned = catalog.load("pruned_scores@frame")
    assert (pruned["quality"] >= 4).all() and len(pruned) == len(np.asarray(catalog.load("pruned_embeddings@frame")))
    selected = catalog.load("selected_ids")
    assert len(selected) == 25 and selected["id"].is_unique and set(selected["id"]) <= set(pruned["id"])
    assert set(catalog.load("selected_documents@frame")["id"]) == set(selected["id"])

    run = _runs(project).iloc[0]  # the default job: the project's first run
    assert run["status"] == "FINISHED"
    assert run["metrics.kept"] + run["metrics.dropped_low_quality"] + run["metrics.dropped_nan_quality"] == 250
    assert run["metrics.budget_docs"] == 25 and run["metrics.selected_size"] == 25
    # ROC-AUC on the held-out human labels: with the default reference raters (issue #25) these are the
    # reference corpus's held-out rows, whatever the corpus (its exact value is recomputed by hand in
    # tests/scoring/test_scoring_score_corpus.py for a corpus's own labels)
    from curation.scoring.config import scoring_config_from_dict
    from curation.scoring.reference import reference_eval_rows

    eval_rows = reference_eval_rows(scoring_config_from_dict({}))
    assert run["metrics.roc_auc_n_eval"] == len(eval_rows) > 5
    assert run["metrics.roc_auc_quality"] > 0.6  # the full corpus's merged quality: 0.75
    assert run["metrics.embedding_cache_hit"] == 0 and run["metrics.scoring_cache_hit"] == 0
    assert run["metrics.pruning/kept"] == run["metrics.kept"] and run["metrics.selection/selected_size"] == 25
    history = mlflow.MlflowClient().get_metric_history(run["run_id"], "selection/joint")
    assert len(history) >= 8 and history[-1].step > history[0].step
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run["run_id"], "plots")}
    assert {"plots/selection_map.png", "plots/rater_spearman.png",  # named as on disk
            "plots/quality_before_after_pruning.png"} <= artifacts

    # Same documents and config: embeddings and scores come from the cache.
    run_kedro(compose_config(project / "conf", [*FAST, "pipeline=scoring"]), project_path=project)
    rerun = _runs(project).iloc[-1]
    assert rerun["metrics.embedding_cache_hit"] == 1 and rerun["metrics.scoring_cache_hit"] == 1
    assert catalog.load("scores@frame").equals(scores)

    # A sweep over lambda reads the one pruned corpus and writes one selection per job.
    import os
    import subprocess
    import sys
    from pathlib import Path

    curate = Path(sys.executable).parent / "curate"
    done = subprocess.run([str(curate), "-m", "pipeline=selection", "selection.lam=0.0,1.0", *FAST], cwd=project,
                          env={**os.environ, "CURATION_PROJECT_ROOT": str(project)}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = _runs(project)
    children = runs[runs["tags.mlflow.parentRunId"].notna()].sort_values("params.selection.lam")
    assert list(children["params.selection.lam"]) == ["0.0", "1.0"]
    assert set(children["params.run.input_namespace"]) == {"default"}
    # lambda = 1 is quality only: its selection has the higher mean quality.
    assert children["metrics.selected_quality_mean"].iloc[1] > children["metrics.selected_quality_mean"].iloc[0]
    for namespace in children["params.run.namespace"]:
        ids = pd.read_parquet(project / "data/07_model_output" / namespace / "selected_ids.parquet")
        assert len(ids) == 25
    # The sweep ends by printing its parent run, its CSV and one row per job (issue #53).
    assert "parent run" in done.stdout and "sweep_summary.csv" in done.stdout
    assert re.search(r"job\s+selection.lam\s+selected_size\s+selected_quality_mean", done.stdout), done.stdout[-3000:]

    # notebooks/sweep_from_mlflow.ipynb, headless, on this store named by MLFLOW_TRACKING_URI (its kernel starts
    # in the checkout's notebooks/): by default lambda against the selection's metrics (compare_selections.ipynb
    # runs in tests/reports/test_reports.py)
    from tests.notebooks import run_notebook

    text, images = run_notebook("sweep_from_mlflow.ipynb", f"sqlite:///{project}/mlruns/mlflow.db", monkeypatch)
    assert "2 jobs" in text and images == 1
    assert re.search(r"selection.lam\s+selection/selected_quality_mean", text), text
