"""The two command lines, as a user types them: `curate` (Hydra) and `kedro run`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import yaml

from curation.config_loader import compose_config
from tests.conftest import CORPUS_DIR

BIN = Path(sys.executable).parent


def _search_runs(store: str):
    """Every run of the project's "curation" experiment (a pandas frame, as mlflow.search_runs gives)."""
    mlflow.set_tracking_uri(store)
    return mlflow.search_runs(experiment_names=["curation"])


def _run(args: list[str], project: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true"}
    done = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow  # the session's `curate -m` sweep of two ingest jobs
def test_multirun_makes_one_parent_and_a_child_per_job(ingest_sweep):
    project = ingest_sweep.project
    runs = _search_runs(ingest_sweep.store)
    parents = runs[runs["tags.curation.sweep"] == "true"]
    assert len(parents) == 1 and parents.iloc[0]["status"] == "FINISHED"
    children = runs[runs["tags.mlflow.parentRunId"] == parents.iloc[0]["run_id"]]
    assert sorted(children["params.data.max_docs"]) == ["40", "80"]
    assert sorted(children["metrics.ingest/rows_kept"]) == [40, 80]  # <stage>/<metric>: charts grouped by stage
    # a short parent name: what ran and the swept values, not where it is recorded (data.path's last part)
    assert parents.iloc[0]["tags.mlflow.runName"] == "sweep ingest path=corpus max_docs=40,80"
    assert set(children["status"]) == {"FINISHED"}
    # Each job wrote its outputs apart from the other's.
    namespaces = sorted(children["params.run.namespace"])
    assert len(set(namespaces)) == 2 and all(ns.startswith("default/multirun/") for ns in namespaces)
    for ns, n in zip(namespaces, (40, 80)):
        from curation.shards import ShardedDataset

        assert len(ShardedDataset(project / "data/02_intermediate" / ns / "documents")) == n
    summary = mlflow.artifacts.load_text(f"runs:/{parents.iloc[0]['run_id']}/sweep_summary.csv")
    header = summary.splitlines()[0].split(",")
    assert header[0] == "params.data.max_docs" and "metrics.ingest/rows_kept" in header[:8]  # swept first
    # the sweep ends by printing its parent run, its CSV (also in the sweep's folder) and one row per job
    out = ingest_sweep.stdout
    assert "parent run" in out and parents.iloc[0]["run_id"] in out, out[-3000:]
    csv = next(project.glob("multirun/*/*/sweep_summary.csv"))
    assert str(csv.relative_to(project)) in out and csv.read_text() == summary
    # Kedro's log lines reach the output, less the two that opened every run (curation/kedro_logging.yml)
    assert "Completed 1 out of" in out and "as logging configuration" not in out and "No typed parameter" not in out
    table = out[out.index("sweep finished"):]
    assert re.search(r"max_docs\s+rows_kept", table) and re.search(r"\n\s*0\s+40\s+40\b", table), table
    assert f"/runs/{parents.iloc[0]['run_id']}?workflowType=machine_learning" in out


@pytest.mark.slow  # the session's `kedro run` subprocess
def test_kedro_run_uses_the_same_defaults_and_records_to_mlflow(kedro_ingest_run):
    run = _search_runs(kedro_ingest_run.store).iloc[0]
    composed = compose_config(kedro_ingest_run.project / "conf", [f"data.path={CORPUS_DIR}", "data.max_docs=30"])
    # Every parameter of the kedro run is the composed Hydra value: one source of defaults.
    from curation.tracking.store import params_for_mlflow

    for key, value in params_for_mlflow(composed).items():
        assert run[f"params.{key}"] == value, key
    assert run["metrics.ingest/rows_kept"] == 30


@pytest.mark.slow  # a `curate` subprocess
def test_cfg_job_prints_the_composed_config(project):
    out = _run([str(BIN / "curate"), "--cfg", "job", "data.max_docs=7"], project).stdout
    printed = yaml.safe_load(out)
    assert printed["data"]["max_docs"] == 7
    assert printed["tracking"] == compose_config(project / "conf")["tracking"]


def test_ci_runs_the_readme_test_command():
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text()
    ci = (repo / ".ci" / "run").read_text()
    command = "bash scripts/test.sh"
    assert f"\n{command}\n" in readme, "README must show the test command on its own line"
    assert any(line.strip() == command for line in ci.splitlines()), ".ci/run must call the README test command"


@pytest.mark.slow  # the notebook's kernel, on the session's `curate -m` sweep
def test_notebook_plots_the_latest_sweep_from_the_store_mlflow_tracking_uri_names(ingest_sweep, monkeypatch):
    from tests.notebooks import run_notebook

    # The kernel starts in this checkout's notebooks/ (whose own store holds no such sweep) and reads the
    # sweep's store, named by MLFLOW_TRACKING_URI.
    text, images = run_notebook("sweep_from_mlflow.ipynb", ingest_sweep.store, monkeypatch)
    assert f"MLflow store {ingest_sweep.store} (MLFLOW_TRACKING_URI)" in text
    assert "'sweep ingest path=corpus max_docs=40,80'" in text and "2 jobs" in text
    # the swept parameter against the jobs' key metric (the documents kept)
    assert re.search(r"data.max_docs\s+ingest/rows_kept\s+status\n\s*40\s+40\.0\s+FINISHED\n\s*80\s+80\.0", text), text
    assert images == 1
