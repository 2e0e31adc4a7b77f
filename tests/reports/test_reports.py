"""Experiment configs compose; the reports pipeline rebuilds artefacts from real MLflow runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from omegaconf import OmegaConf

from curation.config_loader import compose_config
from curation.reporting.artefacts import converged_time
from curation.reporting.registry import build_report, registry
from curation.reporting.runs import choose_runs
from tests.conftest import CORPUS_DIR, REPO

EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml") if not p.stem.startswith("_"))
REPORTED = [e for e in EXPERIMENTS
            if OmegaConf.load(REPO / "conf" / "experiment" / f"{e}.yaml").get("report") is not None]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_config_composes(name):
    cfg = compose_config(REPO / "conf", [f"experiment={name}"])
    assert cfg["tracking"]["experiment_name"] == name or name.startswith(("metarater", "table2"))


@pytest.mark.parametrize("name", REPORTED)
def test_reported_experiments_name_their_builder(name):
    cfg = compose_config(REPO / "conf", [f"experiment={name}"])
    assert cfg["report"]["experiment"] == name and name in registry()


def test_converged_time_is_the_first_point_at_98_percent_of_the_gain():
    traj = pd.DataFrame({"step": [0, 10, 20, 30], "value": [0.0, 0.5, 0.99, 1.0], "x": [0.0, 1.0, 2.0, 3.0]})
    assert converged_time(traj) == (2.0, 20)


def test_choose_runs_keeps_the_children_of_the_newest_sweep():
    runs = pd.DataFrame({
        "run_id": list("abcdef"), "status": ["FINISHED"] * 5 + ["FAILED"],
        "start_time": pd.to_datetime([1, 2, 3, 4, 5, 6], unit="s"),
        "tags.kedro.pipelines": ["selection", "selection", "selection", "reports", None, "selection"],
        "tags.mlflow.parentRunId": ["p1", "p2", "p2", None, None, "p2"],
    })
    assert list(choose_runs(runs, "latest_sweep")["run_id"]) == ["b", "c"]  # not the report, parent or failure
    assert list(choose_runs(runs, "all")["run_id"]) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="report.runs"):
        choose_runs(runs, "newest")


def test_choose_runs_of_a_namespace_keeps_its_runs_and_its_sweeps_jobs():
    runs = pd.DataFrame({
        "run_id": list("abcde"), "status": ["FINISHED"] * 5,
        "start_time": pd.to_datetime([1, 2, 3, 4, 5], unit="s"),
        "tags.kedro.pipelines": ["selection"] * 5,
        "tags.mlflow.parentRunId": [None, "p1", "p1", "p2", None],
        "tags.curation.namespace": ["alice", "alice/multirun/d_t/0", "alice/multirun/d_t/1", "bob/multirun/d_t/0",
                                    "alice/sub"],
    })
    assert list(choose_runs(runs, "latest_sweep", "alice")["run_id"]) == ["b", "c"]  # not bob's newer sweep
    assert list(choose_runs(runs, "all", "alice")["run_id"]) == ["a", "b", "c"]  # not the namespace alice/sub
    assert list(choose_runs(runs, "latest_sweep", "bob")["run_id"]) == ["d"]
    assert list(choose_runs(runs, "latest_sweep")["run_id"]) == ["d"]  # no namespace: every run, as before


def test_unknown_artefact_and_no_runs_are_clear_errors():
    with pytest.raises(ValueError, match="no report builder"):
        build_report("fig99", pd.DataFrame({"run_id": ["a"]}), {}, {})
    with pytest.raises(ValueError, match="curate -m experiment=fig7_group_size"):
        build_report("fig7_group_size", pd.DataFrame(), {}, {})


def _curate(project: Path, *args: str) -> subprocess.CompletedProcess:
    curate = Path(sys.executable).parent / "curate"
    done = subprocess.run([str(curate), *args], cwd=project, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CURATION_PROJECT_ROOT": str(project)})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow  # the default job on 250 documents, a `curate -m` sweep, the report job and a notebook
def test_sweep_then_report_from_mlflow(default_job_250, monkeypatch):
    project = default_job_250  # the session's default job (ingest+scoring+pruning+selection) ran there
    small = [f"data.path={CORPUS_DIR}", "data.max_docs=250", "budget.candidates=120", "selection.steps=30",
             "selection.history_every=5"]
    _curate(project, "-m", "experiment=fig7_group_size", "selection.group_size=2,8", *small)
    _curate(project, "pipeline=reports", "experiment=fig7_group_size", f"data.path={CORPUS_DIR}")

    out = project / "data" / "08_reporting" / "default" / "fig7_group_size"
    table = pd.read_csv(out / "table.csv")
    assert list(table["G"]) == [2, 8] and table["final_fl"].between(0, 1).all()
    assert (out / "group_size.png").stat().st_size > 1000
    markdown = (out / "report.md").read_text()
    assert "**This run**" in markdown and "| 2 |" in markdown and "![group_size](group_size.png)" in markdown
    assert len(pd.read_csv(out / "runs.csv")) == 2

    mlflow.set_tracking_uri(f"sqlite:///{project}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["fig7_group_size"])
    report_run = runs[runs["tags.kedro.pipelines"] == "reports"].iloc[0]
    assert report_run["metrics.reports/report_runs"] == 2
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(report_run["run_id"], "plots/report_plots")}
    assert "plots/report_plots/group_size.png" in artifacts
    # the sweep's jobs selected 10% of a 120-candidate subsample each
    jobs = runs[runs["tags.kedro.pipelines"] == "selection"]
    assert set(jobs["metrics.selection/candidates"]) == {120.0} and set(jobs["metrics.selection/budget_docs"]) == {12.0}

    # notebooks/compare_selections.ipynb reads the same sweep from the store (executed so it cannot rot): its
    # kernel starts in the checkout's notebooks/, the store named by MLFLOW_TRACKING_URI
    from tests.notebooks import run_notebook

    text, images = run_notebook("compare_selections.ipynb", f"sqlite:///{project}/mlruns/mlflow.db", monkeypatch,
                                COMPARE_EXPERIMENT="fig7_group_size")
    assert "fig7_group_size: 2 selection runs" in text and "2 trajectories" in text and images == 2
    labels = [line.strip() for line in text.splitlines() if "group_size=" in line and "lam=" in line]
    assert len(labels) == 2 and all(line.count("group_size=") == 1 for line in labels), text  # each setting once
    assert "group_size=2" in labels[0] + labels[1] and "group_size=8" in labels[0] + labels[1]


def test_log_benchmark_records_files_metrics_and_skipped_nans(project, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from curation.tracking.benchmarks import log_benchmark

    csv = tmp_path / "bench.csv"
    pd.DataFrame({"n": [1, 2], "seconds": [0.5, 0.25]}).to_csv(csv, index=False)
    run_id = log_benchmark("bench_x", files=[csv], params={"sizes": "1,2"},
                           metrics={"ratio": 2.0, "unreached": float("nan")}, root=project)
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{project}/mlruns/mlflow.db")
    run = client.get_run(run_id)
    assert run.data.metrics == {"ratio": 2.0} and run.data.params == {"sizes": "1,2"}
    assert run.data.tags["skipped_metrics"] == "unreached" and run.data.tags["benchmark"] == "bench_x"
    assert client.get_experiment(run.info.experiment_id).name == "benchmarks"
    assert [a.path for a in client.list_artifacts(run_id)] == ["bench.csv"]


@pytest.mark.slow  # two `curate pipeline=reports` processes (~20 s each on 2 cores)
def test_two_namespaces_reproducing_one_table_keep_two_reports_each_from_its_own_runs(project):
    """Issue #52: reports were written to data/08_reporting/<experiment>/ whatever the namespace, and built from
    the experiment's newest run whoever recorded it, so two people (or one person on two corpora) reproducing
    one table overwrote each other's report without a word. Each namespace gets a scoring run in the one MLflow
    experiment, recorded through MLflow's API with the tags and the ``tables/quality_share_table.csv`` artifact a
    scoring run logs (a real scoring run costs minutes); both reports run at once, one per namespace."""
    from curation.tracking.store import setup_experiment

    tracking = {"uri": "sqlite:///mlruns/mlflow.db", "artifact_location": "mlruns/artifacts",
                "experiment_name": "table6_quality_distribution"}
    experiment = setup_experiment(tracking, project)
    client = mlflow.MlflowClient()
    shares, run_ids = {}, {}
    for namespace, share in (("alice", [0.25, 0.75]), ("bob", [0.5, 0.5])):  # bob's run is the newer one
        run = client.create_run(experiment, tags={"kedro.pipelines": "scoring", "curation.namespace": namespace})
        shares[namespace] = pd.DataFrame({"score": [3, 4], "share": share})
        client.log_text(run.info.run_id, shares[namespace].to_csv(index=False), "tables/quality_share_table.csv")
        client.set_terminated(run.info.run_id)
        run_ids[namespace] = run.info.run_id
    curate = Path(sys.executable).parent / "curate"
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project)}
    reports = {ns: subprocess.Popen([str(curate), "pipeline=reports", "experiment=table6_quality_distribution",
                                     f"run.namespace={ns}"], cwd=project, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True) for ns in shares}
    for namespace, process in reports.items():
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
    for namespace, share in shares.items():
        out = project / "data" / "08_reporting" / namespace / "table6_quality_distribution"
        pd.testing.assert_frame_equal(pd.read_csv(out / "table.csv"), share)
        assert list(pd.read_csv(out / "runs.csv")["run_id"]) == [run_ids[namespace]]
        assert "Table 6" in (out / "report.md").read_text() and (out / "quality_share.png").stat().st_size > 1000
    assert not (project / "data" / "08_reporting" / "table6_quality_distribution").exists()
