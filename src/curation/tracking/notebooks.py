"""What the notebooks under ``notebooks/`` read: the MLflow store, its runs, a sweep's jobs.

The store is ``MLFLOW_TRACKING_URI`` when set (MLflow's own variable: a store outside the project, a team
server), else the project's ``tracking.uri``; the project (:func:`curation.paths.project_root`) is
``CURATION_PROJECT_ROOT`` when set, else the checkout the kernel runs in (Jupyter, nbclient and papermill start
it in the notebook's folder: ``notebooks/`` of a checkout). The experiment is ``MLFLOW_EXPERIMENT_NAME``
when set, else ``tracking.experiment_name``. Metric columns come as logged (``metrics.selection/...``) and
without their stage (``metrics.selected_quality_mean``), in stores from before and after issue #53.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from curation.tracking.metric_names import with_flat_columns


@dataclass(frozen=True)
class Store:
    uri: str
    experiment: str
    root: Path
    source: str  # where the URI came from, for the notebook's first line

    def describe(self) -> str:
        return f"MLflow store {self.uri} ({self.source}), experiment {self.experiment!r}"


def open_store(tracking: Mapping[str, Any], root: Path, experiment: str | None = None) -> Store:
    """Point MLflow at the notebook's store (checked, repaired if a migration was cut short); its description.
    ``tracking``: the project's composed ``tracking`` group (``compose_config(root / "conf")["tracking"]``)."""
    import mlflow

    from curation.tracking.store import tracking_uri

    env_uri = os.environ.get("MLFLOW_TRACKING_URI")
    uri = tracking_uri(env_uri or str(tracking["uri"]), root)
    source = "MLFLOW_TRACKING_URI" if env_uri else f"tracking.uri of {root}"
    mlflow.set_tracking_uri(uri)
    name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or str(tracking["experiment_name"])
    return Store(uri, name, root, source)


def search_runs(store: Store) -> pd.DataFrame:
    """Every run of the store's experiment, with ``metrics.<metric>`` beside ``metrics.<stage>/<metric>``."""
    import mlflow

    if mlflow.get_experiment_by_name(store.experiment) is None:
        raise LookupError(f"{store.describe()}: no such experiment; run `curate -m ...` first, or set "
                          "MLFLOW_TRACKING_URI / MLFLOW_EXPERIMENT_NAME to the store and experiment to read")
    return with_flat_columns(mlflow.search_runs(experiment_names=[store.experiment]))


def latest_sweep(runs: pd.DataFrame) -> tuple[pd.Series, pd.DataFrame]:
    """The newest sweep's parent run and its jobs (in job order)."""
    flags = runs.get("tags.curation.sweep", pd.Series("", index=runs.index))
    sweeps = runs[flags == "true"].sort_values("start_time")
    if not len(sweeps):
        raise LookupError("no sweep in the store yet: run e.g. "
                          "`curate -m pipeline=selection selection=datamask selection.lam=0.1,0.3,0.5`")
    parent = sweeps.iloc[-1]
    children = runs[runs["tags.mlflow.parentRunId"] == parent["run_id"]]
    job = pd.to_numeric(children.get("tags.hydra.job.num"), errors="coerce")
    return parent, children.assign(_job=job).sort_values("_job").drop(columns="_job")


def metric_column(runs: pd.DataFrame, name: str) -> str:
    """``selected_quality_mean``, ``selection/selected_quality_mean`` or ``metrics.…`` -> the frame's column."""
    column = name if name.startswith("metrics.") else f"metrics.{name}"
    if column not in runs:
        raise KeyError(f"no metric {name!r} in these runs; some they have: "
                       f"{sorted(c[8:] for c in runs.columns if c.startswith('metrics.') and '/' in c)[:12]}")
    return column


def history(run_id: str, key: str) -> list[tuple[int, float]]:
    """A metric's series (step, value), ``key`` with or without its stage (``joint`` or ``selection/joint``)."""
    import mlflow

    from curation.tracking.metric_names import history_key

    client = mlflow.MlflowClient()
    name = history_key(key, client.get_run(run_id).data.metrics)
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, name))
