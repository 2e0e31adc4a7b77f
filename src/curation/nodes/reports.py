"""Reports nodes: fetch an experiment's runs from MLflow, rebuild the paper artefact from them.

The builders (curation.reporting.artefacts) see plain frames; this module is the
only place that talks to MLflow, and it reads runs by experiment name and tags,
never from hand-copied numbers.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from curation.paths import project_root
from curation.reporting.artefacts import build_report, registry
from curation.tracking.store import resolve_uri

log = logging.getLogger(__name__)


def _client(tracking: dict[str, Any]):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=resolve_uri(str(tracking["uri"]), project_root()))


def choose_runs(runs: pd.DataFrame, mode: str) -> pd.DataFrame:
    """Finished pipeline runs (not reports, not sweep parents); ``latest_sweep``: the children of the
    most recent sweep, or the latest run when the experiment has no sweep; ``all``: every run."""
    if mode not in ("latest_sweep", "all"):
        raise ValueError(f"report.runs must be 'latest_sweep' or 'all', got {mode!r}")
    if runs.empty:
        return runs
    pipelines = runs.get("tags.kedro.pipelines", pd.Series(None, index=runs.index)).fillna("")
    keep = runs[(pipelines != "") & ~pipelines.str.contains("reports") & (runs["status"] == "FINISHED")]
    if mode == "all" or keep.empty:
        return keep.sort_values("start_time").reset_index(drop=True)
    parent = keep.get("tags.mlflow.parentRunId", pd.Series(None, index=keep.index))
    children = keep[parent.notna()]
    if children.empty:
        return keep.sort_values("start_time").tail(1).reset_index(drop=True)
    latest = children.sort_values("start_time")["tags.mlflow.parentRunId"].iloc[-1]
    return children[children["tags.mlflow.parentRunId"] == latest].sort_values("start_time").reset_index(drop=True)


def collect_runs(report: dict[str, Any], tracking: dict[str, Any]) -> tuple[pd.DataFrame, dict, dict, dict[str, float]]:
    """The runs of ``report.experiment`` with the histories and table artifacts its builder declares."""
    import mlflow

    name = report.get("experiment")
    known = registry()
    if not name:
        raise ValueError("report.experiment is not set: run `curate pipeline=reports experiment=<name>` "
                         f"with one of {sorted(known)}")
    if name not in known:
        raise ValueError(f"report.experiment={name!r} has no report builder; known: {sorted(known)}")
    source = report.get("mlflow_experiment") or name
    client = _client(tracking)
    experiment = client.get_experiment_by_name(source)
    if experiment is None:
        raise ValueError(f"MLflow has no experiment {source!r} at {tracking['uri']}: run "
                         f"`curate -m experiment={name}` first")
    mlflow.set_tracking_uri(client.tracking_uri)
    all_runs = mlflow.search_runs(experiment_ids=[experiment.experiment_id], output_format="pandas")
    runs = choose_runs(all_runs, str(report.get("runs", "latest_sweep")))
    spec = known[name]
    histories: dict[str, dict[str, pd.DataFrame]] = {}
    tables: dict[str, dict[str, pd.DataFrame]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run_id in runs["run_id"]:
            histories[run_id] = {
                key: pd.DataFrame([(m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, key)],
                                  columns=["step", "value", "timestamp"]).sort_values("step", kind="stable")
                for key in spec.history_keys
            }
            tables[run_id] = {}
            for artifact in spec.table_artifacts:
                try:
                    path = client.download_artifacts(run_id, f"tables/{artifact}.csv", tmp)
                except Exception as error:  # noqa: BLE001 -- a run without that table is reported, not fatal
                    log.warning("run %s has no tables/%s.csv: %s", run_id, artifact, error)
                    continue
                tables[run_id][artifact] = pd.read_csv(path)
    log.info("report %s: %d of %d runs of MLflow experiment %s", name, len(runs), len(all_runs), source)
    metrics = {"report_runs": float(len(runs)), "experiment_runs": float(len(all_runs))}
    return runs, histories, tables, metrics


def write_report(runs: pd.DataFrame, histories: dict, tables: dict, report: dict[str, Any]
                 ) -> tuple[str, pd.DataFrame, pd.DataFrame, dict[str, Any], pd.DataFrame]:
    """Markdown, the table (this run), the paper's table (empty when the paper gives none), the
    figures, and the list of runs the report was built from."""
    name = report["experiment"]
    result = build_report(name, runs, histories, tables)
    scale = report.get("scale_note") or "reduced scale, 2 CPU cores"
    listing_cols = [c for c in ("run_id", "tags.mlflow.runName", "start_time", "tags.mlflow.parentRunId")
                    if c in runs]
    return (result.markdown(scale), result.table,
            result.paper if result.paper is not None else pd.DataFrame({"note": ["the paper gives no numbers"]}),
            result.figures, runs[listing_cols].astype(str))
