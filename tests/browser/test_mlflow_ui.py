"""The MLflow UI, in headless Chromium, lists a real `curate -m` sweep: the parent run and its child runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow

from tests.conftest import CORPUS_DIR

BIN = Path(sys.executable).parent


def test_mlflow_ui_lists_the_sweep_runs(project, page, start_server, save_screenshot):
    store = f"sqlite:///{project}/mlruns/mlflow.db"
    (project / "mlruns").mkdir()
    client = mlflow.MlflowClient(tracking_uri=store)
    client.search_experiments()  # creates the tables now, so the server and the sweep never both create them
    # The server starts in the background while the sweep runs (it reads the store per request).
    server = start_server([str(BIN / "mlflow"), "server", "--backend-store-uri", store, "--host", "127.0.0.1",
                           "--port", "{port}", "--workers", "1"], project,
                          "/api/2.0/mlflow/experiments/search", data=json.dumps({"max_results": 10}).encode())

    # A real sweep: one parent run, one child run per job, named after the swept value.
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true"}
    done = subprocess.run([str(BIN / "curate"), "-m", "pipeline=ingest", f"data.path={CORPUS_DIR}",
                           "data.max_docs=40,80", "tracking.run_name=docs_${data.max_docs}"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    experiment = client.get_experiment_by_name("curation")
    (parent,) = client.search_runs([experiment.experiment_id], "tags.`curation.sweep` = 'true'")
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    child_names = sorted(run.info.run_name for run in children)
    assert child_names == ["docs_40", "docs_80"]
    base = server.wait_ready()

    # The experiment's runs table (the "Model training" view; MLflow 3 opens GenAI views by default).
    page.goto(f"{base}/#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning",
              wait_until="domcontentloaded")
    parent_row = page.locator('[role="row"]', has_text=parent.info.run_name)
    parent_row.first.wait_for()  # the SPA fetched the runs and rendered the table
    page.get_by_text("3 matching runs").wait_for()
    # Child runs are folded under their parent: unfold them, then every child is a visible row.
    parent_row.first.locator('button[data-component-id*="runnamecellrenderer"]').click()
    for name in child_names:
        page.locator('[role="row"]', has_text=name).get_by_text(name, exact=True).wait_for()
    assert page.locator('[role="row"]', has_text="docs_").count() == 3

    close_assistant = page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]')
    if close_assistant.count():  # a side panel that only hides the table in the screenshot
        close_assistant.click()
    save_screenshot(page, "mlflow_sweep_runs")
