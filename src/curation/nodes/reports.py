"""Reports nodes: fetch an experiment's runs from MLflow (:mod:`curation.tracking.report_runs`), rebuild
the paper artefact from them (:mod:`curation.reporting.registry`)."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from curation.paths import project_root
from curation.tracking.report_runs import fetch_runs
from curation.tracking.store import resolve_uri

log = logging.getLogger(__name__)


def collect_runs(report: dict[str, Any], tracking: dict[str, Any], run: dict[str, Any] | None = None
                 ) -> tuple[pd.DataFrame, dict, dict, dict[str, float]]:
    """The runs of ``report.experiment`` recorded in this run's namespace (``run.namespace``, its sweeps'
    jobs included), with the histories and table artifacts its builder declares."""
    from curation.reporting.registry import registry  # scipy.stats, matplotlib: when the node runs

    name = report.get("experiment")
    known = registry()
    if not name:
        raise ValueError("report.experiment is not set: run `curate pipeline=reports experiment=<name>` "
                         f"with one of {sorted(known)}")
    if name not in known:
        raise ValueError(f"report.experiment={name!r} has no report builder; known: {sorted(known)}")
    source = report.get("mlflow_experiment") or name
    spec = known[name]
    fetched = fetch_runs(resolve_uri(str(tracking["uri"]), project_root()), source,
                         str(report.get("runs", "latest_sweep")), spec.history_keys, spec.table_artifacts,
                         hint=f"run `curate -m experiment={name}` first",
                         namespace=str((run or {}).get("namespace") or "default"))
    log.info("report %s: %d of %d runs of MLflow experiment %s", name, len(fetched.runs), len(fetched.all_runs),
             source)
    metrics = {"report_runs": float(len(fetched.runs)), "experiment_runs": float(len(fetched.all_runs))}
    return fetched.runs, fetched.histories, fetched.tables, metrics


def write_report(runs: pd.DataFrame, histories: dict, tables: dict, report: dict[str, Any]
                 ) -> tuple[str, pd.DataFrame, pd.DataFrame, dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """Markdown, the table (this run), the paper's table (empty when the paper gives none), the
    figures, the list of runs the report was built from, and the pairwise decisions (a note row
    where the artefact compares no trained corpora)."""
    from curation.reporting.registry import build_report

    name = report["experiment"]
    result = build_report(name, runs, histories, tables)
    scale = report.get("scale_note") or "reduced scale, 2 CPU cores"
    listing_cols = [c for c in ("run_id", "tags.mlflow.runName", "start_time", "tags.mlflow.parentRunId")
                    if c in runs]
    return (result.markdown(scale), result.table,
            result.paper if result.paper is not None else pd.DataFrame({"note": ["the paper gives no numbers"]}),
            result.figures, runs[listing_cols].astype(str),
            result.decisions if result.decisions is not None
            else pd.DataFrame({"note": ["this artefact compares no trained corpora"]}))
