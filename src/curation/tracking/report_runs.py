"""Read an experiment's runs back from MLflow for the reports pipeline: runs, metric histories, tables.

The report builders (:mod:`curation.reporting`) see plain frames; this module
fetches what a builder declares (``history_keys``, ``table_artifacts``), by
experiment name and tags, never from hand-copied numbers. Builders name a metric without its stage
(``selected_quality_mean``, ``joint``) and a table by its output (``quality_share_table``): runs logged since
issue #53 (``selection/selected_quality_mean``, ``tables/quality_share.csv``) and older ones read alike
(:mod:`curation.tracking.metric_names`).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from curation.reporting.runs import choose_runs
from curation.tracking.metric_names import artifact_of, history_key, with_flat_columns

log = logging.getLogger(__name__)


@dataclass
class FetchedRuns:
    all_runs: pd.DataFrame  # every run of the experiment
    runs: pd.DataFrame  # the chosen ones (:func:`curation.reporting.runs.choose_runs`)
    histories: dict[str, dict[str, pd.DataFrame]]  # run id -> metric -> (step, value, timestamp)
    tables: dict[str, dict[str, pd.DataFrame]]  # run id -> table artifact name -> frame


def fetch_runs(tracking_uri: str, experiment: str, mode: str, history_keys: Sequence[str],
               table_artifacts: Sequence[str], hint: str = "", namespace: str | None = None) -> FetchedRuns:
    """The runs of MLflow experiment ``experiment`` chosen by ``mode`` (among those of ``namespace`` when given:
    :func:`curation.reporting.runs.choose_runs`), with the declared histories and ``tables/<name>.csv`` artifacts
    (a run without one is logged and skipped). ``hint``: how to make the runs, for the error when the experiment
    does not exist."""
    import mlflow
    from mlflow import MlflowClient

    from curation.tracking.store import prepare_store

    prepare_store(tracking_uri)  # a report without tracking opens the store too: checked, repaired if need be
    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"MLflow has no experiment {experiment!r} at {tracking_uri}{': ' + hint if hint else ''}")
    mlflow.set_tracking_uri(client.tracking_uri)
    recorded = mlflow.search_runs(experiment_ids=[found.experiment_id], output_format="pandas")
    all_runs = with_flat_columns(recorded)  # + metrics.<metric> beside metrics.<stage>/<metric>
    runs = choose_runs(all_runs, mode, namespace)
    histories: dict[str, dict[str, pd.DataFrame]] = {}
    tables: dict[str, dict[str, pd.DataFrame]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _, run in runs.iterrows():
            run_id = run["run_id"]
            row = recorded[recorded["run_id"] == run_id].iloc[0]
            logged = [c[len("metrics."):] for c in recorded.columns if c.startswith("metrics.") and pd.notna(row[c])]
            histories[run_id] = {
                key: pd.DataFrame([(m.step, m.value, m.timestamp)
                                   for m in client.get_metric_history(run_id, history_key(key, logged))],
                                  columns=["step", "value", "timestamp"]).sort_values("step", kind="stable")
                for key in history_keys
            }
            tables[run_id] = {}
            for artifact in table_artifacts:
                where = artifact_of(run, artifact, "tables", ".csv")
                try:
                    path = client.download_artifacts(run_id, where, tmp)
                except Exception as error:  # noqa: BLE001 -- a run without that table is reported, not fatal
                    log.warning("run %s has no %s: %s", run_id, where, error)
                    continue
                tables[run_id][artifact] = pd.read_csv(path)
    return FetchedRuns(all_runs, runs, histories, tables)
