"""The MLflow UI, in headless Chromium, as a user meets it after a real `curate -m` sweep (the session's
``ingest_sweep``): the experiments list, the experiment's runs table (the parent run and, unfolded, a child
per job, each with its corpus in the Datasets column), and the compare view of the two jobs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import mlflow
import pytest

from curation.tracking.store import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG

BIN = Path(sys.executable).parent


def _close_side_panels(page) -> None:
    """First-visit hints (a popover that takes every click until dismissed) and the assistant panel:
    they only cover the page. Best effort: a hint that is not there is fine."""
    for locator in (page.get_by_role("button", name="Got it"),
                    page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]')):
        try:
            if locator.count():
                locator.first.click(timeout=5_000)
        except Exception:  # gone meanwhile, or covered by the next hint
            pass


@pytest.mark.slow  # `mlflow server` on the session's `curate -m` sweep, and Chromium
def test_mlflow_ui_from_the_experiments_list_to_a_compare_view(ingest_sweep, page, start_server, save_screenshot):
    store = ingest_sweep.store
    client = mlflow.MlflowClient(tracking_uri=store)
    server = start_server([str(BIN / "mlflow"), "server", "--backend-store-uri", store, "--host", "127.0.0.1",
                           "--port", "{port}", "--workers", "1"], ingest_sweep.project.parent,
                          "/api/2.0/mlflow/experiments/search", data=json.dumps({"max_results": 10}).encode())

    # A real sweep (`curate -m pipeline=ingest data.max_docs=40,80`): one parent run, one child run per job,
    # named after what the job ran.
    experiment = client.get_experiment_by_name("curation")
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    (parent,) = client.search_runs([experiment.experiment_id], "tags.`curation.sweep` = 'true'")
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    child_names = sorted(run.info.run_name for run in children)
    assert child_names == ["ingest path=corpus max_docs=40 #0", "ingest path=corpus max_docs=80 #1"]
    base = server.wait_ready()

    # A user opens the UI's home page and clicks the experiment in its list.
    page.goto(f"{base}/", wait_until="domcontentloaded")
    page.get_by_role("link", name="curation", exact=True).first.click()
    page.wait_for_url(re.compile(rf"#/experiments/{experiment.experiment_id}"))
    runs_heading = page.get_by_text("matching runs")
    try:
        runs_heading.wait_for(timeout=15_000)
    except Exception:
        # MLflow 3.17 opens every experiment in the view its sidebar toggle last had in this browser (GenAI
        # for a new browser) and ignores the experiment's kind tag (mlflow/mlflow#24498): one click on
        # "Model training", which the browser then remembers.
        _close_side_panels(page)
        save_screenshot(page, "mlflow_experiment_first_view")
        page.get_by_text("Model training", exact=True).first.click()
    page.get_by_text("3 matching runs").wait_for()
    parent_row = page.locator('[role="row"]', has_text=parent.info.run_name)
    # Child runs are folded under their parent: unfold them, then every child is a visible row.
    parent_row.first.locator('button[data-component-id*="runnamecellrenderer"]').click()
    for name in child_names:
        row = page.locator('[role="row"]', has_text=name)
        row.get_by_text(name, exact=True).wait_for()
        assert "corpus" in row.first.inner_text()  # the Datasets column: the corpus this job read
    _close_side_panels(page)
    save_screenshot(page, "mlflow_sweep_runs")

    # The compare view of the two jobs: select both rows, then "Compare".
    for name in child_names:
        page.locator('[role="row"]', has_text=name).first.get_by_role("checkbox").first.check()
    page.get_by_role("button", name=re.compile(r"^Compare")).first.click()
    page.wait_for_url(re.compile(r"compare-runs"))
    for name in child_names:
        page.get_by_text(name).first.wait_for()
    max_docs_row = page.locator("tr", has_text="data.max_docs").first
    max_docs_row.wait_for()
    assert re.search(r"40\s+80|80\s+40", max_docs_row.inner_text()), max_docs_row.inner_text()
    _close_side_panels(page)
    save_screenshot(page, "mlflow_compare_sweep_jobs")


@pytest.mark.slow  # `mlflow server` on the session's `curate -m` sweep, and Chromium
def test_the_printed_run_url_opens_the_run_in_the_model_training_view(ingest_sweep, page, start_server,
                                                                       save_screenshot):
    """A new browser (no *Model training* click remembered) follows the URL a job's summary printed: the run's
    own page opens in the model-training view (breadcrumb *Runs*, not *GenAI > Evaluations*), and its metric
    charts are grouped by stage (issue #53)."""
    store = ingest_sweep.store
    server = start_server([str(BIN / "mlflow"), "server", "--backend-store-uri", store, "--host", "127.0.0.1",
                           "--port", "{port}", "--workers", "1"], ingest_sweep.project.parent,
                          "/api/2.0/mlflow/experiments/search", data=json.dumps({"max_results": 10}).encode())
    printed = re.findall(r"this run\s+(http://127\.0\.0\.1:\d+)(/#/experiments/\d+/runs/\w+\?workflowType=machine_learning)",
                         ingest_sweep.stdout)
    assert len(printed) == 2, ingest_sweep.stdout[-3000:]  # one per job
    base = server.wait_ready()
    page.goto(base + printed[-1][1], wait_until="domcontentloaded")  # the printed path, on the test server's port
    page.get_by_text("ingest path=corpus max_docs=80 #1").first.wait_for()
    page.get_by_text("Model registry", exact=True).first.wait_for()  # the model-training sidebar
    assert page.get_by_text("Evaluations", exact=True).count() == 0  # where a GenAI browser puts a run
    assert "workflowType=machine_learning" in page.url
    page.get_by_text("Model metrics", exact=True).first.click()
    for stage in ("ingest", "time", "disk"):  # one section of charts per stage
        page.get_by_text(stage, exact=True).first.wait_for()
    _close_side_panels(page)
    save_screenshot(page, "mlflow_printed_run_url")
