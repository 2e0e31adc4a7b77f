"""The ingest pipeline in a real KedroSession, from a composed Hydra config, recorded in MLflow."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pandas as pd
import pytest

from curation.config_loader import compose_config, overrides_from_params
from curation.hydra_app import run_kedro
from tests.conftest import CORPUS_DIR


def _mlflow_runs(project):
    mlflow.set_tracking_uri(f"sqlite:///{project}/mlruns/mlflow.db")
    return mlflow.search_runs(experiment_names=["curation"])


@pytest.mark.slow  # a whole ingest Kedro job
def test_ingest_in_kedro_session_reads_back_catalog_and_mlflow(project):
    params = compose_config(project / "conf", [f"data.path={CORPUS_DIR}", "data.max_docs=300",
                                               "pipeline=ingest"])
    assert params["data"]["max_docs"] == 300 and params["tracking"]["uri"] == "sqlite:///mlruns/mlflow.db"
    run_kedro(params, project_path=project)

    from kedro.framework.session import KedroSession

    with KedroSession.create(project_path=project, runtime_params={"data": {"path": str(CORPUS_DIR)}}) as session:
        catalog = session.load_context().catalog
        documents = catalog.load("documents@frame")
        doc_stats = catalog.load("document_stats")
        rejected = catalog.load("rejected_documents")
    assert len(documents) == 300 and documents["id"].is_unique
    assert len(doc_stats) == 300 and (doc_stats["n_chars"] == documents["text"].str.len()).all()
    # no invalid row in the bundled corpus; its own near-duplicate pairs are dropped (docs/data.md)
    assert set(rejected["reason"]) == {"near_duplicate"} and rejected["duplicate_of"].notna().all()
    assert (project / "data/08_reporting/default/document_stats.png").stat().st_size > 10_000
    table = pd.read_csv(project / "data/08_reporting/default/source_stats.csv")
    assert table.loc[table["source"] == "__all__", "docs"].item() == 300

    runs = _mlflow_runs(project)
    assert len(runs) == 1
    run = runs.iloc[0]
    assert run["status"] == "FINISHED"
    assert run["params.data.max_docs"] == "300" and run["params.pipeline"] == "ingest"
    # metrics are named <stage>/<metric>: the MLflow run page groups its charts by stage (issue #53)
    assert run["metrics.ingest/rows_read"] == 300 + len(rejected) and run["metrics.ingest/rows_kept"] == 300
    assert run["metrics.ingest/dropped_near_duplicate"] == len(rejected)
    assert run["metrics.ingest/dropped_empty_text"] == 0 and run["metrics.ingest/docs"] == 300
    assert not [c for c in runs.columns if c.startswith("metrics.") and "/" not in c]  # every metric has a stage
    # each node's own wall time, where a run's time goes
    nodes = {c for c in runs.columns if c.startswith("metrics.time/") and c.endswith("_node")}
    assert nodes == {"metrics.time/ingest_documents_node", "metrics.time/compute_document_statistics_node"}
    assert 0 < run["metrics.time/compute_document_statistics_node"] < run["metrics.time/pipeline_seconds"]
    shares = [c for c in runs.columns if c.startswith("metrics.ingest/share_source_")]
    assert abs(sum(run[c] for c in shares) - 1.0) < 1e-9
    # readers that name a metric without its stage (reports, notebooks) read it so, from old stores too
    from curation.tracking.metric_names import with_flat_columns

    assert with_flat_columns(runs).iloc[0]["metrics.rows_kept"] == 300
    # the figure is named as on disk (data/08_reporting/default/document_stats.png)
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run["run_id"], "plots")}
    assert "plots/document_stats.png" in artifacts
    assert '"document_stats_plot": "plots/document_stats.png"' in run["tags.curation.artifacts"]
    # the run logs the PNG the catalog wrote (dpi 110), not a second rendering of the figure
    logged = mlflow.artifacts.download_artifacts(run_id=run["run_id"], artifact_path="plots/document_stats.png",
                                                 dst_path=str(project / "downloaded"))
    assert Path(logged).read_bytes() == (project / "data/08_reporting/default/document_stats.png").read_bytes()


@pytest.mark.slow  # a Kedro job
def test_failed_run_is_marked_failed_in_mlflow(project, tmp_path):
    (tmp_path / "bad").mkdir()
    pd.DataFrame({"id": ["a"], "body": ["no text column"]}).to_parquet(tmp_path / "bad" / "x.parquet")
    params = compose_config(project / "conf", [f"data.path={tmp_path / 'bad'}", "pipeline=ingest"])
    with pytest.raises(Exception, match="required column 'text' is missing"):
        run_kedro(params, project_path=project)
    runs = _mlflow_runs(project)
    assert list(runs["status"]) == ["FAILED"]


def test_unknown_keys_and_bad_types_fail_at_compose(project):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose_config(project / "conf", ["data.max_dcos=5"])
    with pytest.raises(ConfigCompositionException):
        compose_config(project / "conf", ["data.max_docs=lots"])


def test_kedro_runtime_params_become_hydra_overrides(project):
    runtime = {"data": {"max_docs": 500, "path": "s3://bucket/a b/*.parquet"}, "tracking": {"enabled": False}}
    overrides = overrides_from_params(runtime)
    assert overrides == ["data.max_docs=500", "data.path='s3://bucket/a b/*.parquet'", "tracking.enabled=false"]
    composed = compose_config(project / "conf", overrides)
    assert composed["data"]["path"] == "s3://bucket/a b/*.parquet" and composed["data"]["max_docs"] == 500
