"""MLflow child runs of the pipeline's run: one per Meta-rater proxy or comparison run.

:class:`ChildRuns` is the ``on_result`` callback of :mod:`curation.metarater.experiment`
(:data:`curation.metarater.experiment.OnResult`): each call opens a child run of
the active run (the Kedro hook's), logs the result's losses, timings, weights
and loss curve, and closes it. Without an active run it does nothing.

Metric names are staged like the pipeline runs' (:mod:`curation.tracking.metric_names`): a proxy's
``metarater/val_loss``, ``metarater/train_loss_curve``, a ``decide`` cell's ``decide/average``, so MLflow groups
a child run's charts as it does its parent's. Before issue #53 they were logged without the stage
(``val_loss``); readers go through :func:`~curation.tracking.metric_names.with_flat_columns` or
:func:`~curation.tracking.metric_names.history_key`, which read both.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from curation.tracking.metric_names import staged
from curation.tracking.store import MAX_PARAM_VALUE

RESULT_METRICS = ("val_loss", "train_loss", "seconds", "cpu_seconds", "tokens", "epochs", "selection_tokens",
                  "selection_docs")


class ChildRuns:
    """MLflow child runs of the pipeline's run (the Kedro hook's active run); a no-op without one."""

    stage = "metarater"  # the child runs' metrics are ``metarater/<metric>``, as the metarater pipelines' are

    def __init__(self) -> None:
        import mlflow

        self.parent = mlflow.active_run()
        self.client = mlflow.MlflowClient() if self.parent is not None else None

    def __call__(self, name: str, kind: str, result: dict[str, Any], params: dict[str, Any],
                 metrics: dict[str, float]) -> None:
        if self.parent is None:
            return
        from mlflow.entities import Metric, Param

        run = self.client.create_run(self.parent.info.experiment_id, run_name=name,
                                     tags={"mlflow.parentRunId": self.parent.info.run_id,
                                           "curation.metarater.kind": kind,
                                           "curation.metarater.reused": str(bool(result.get("reused")))})
        now = int(time.time() * 1000)
        values = {k: result[k] for k in RESULT_METRICS if result.get(k) is not None}
        values.update(metrics)
        curve = staged(self.stage, "train_loss_curve")
        series = [Metric(curve, float(loss), now, int(step)) for step, loss in result.get("history", [])]
        entries = [Metric(staged(self.stage, k), float(v), now, 0) for k, v in values.items()
                   if np.isfinite(float(v))] + series
        for start in range(0, len(entries), 1000):
            self.client.log_batch(run.info.run_id, metrics=entries[start:start + 1000])
        self.client.log_batch(run.info.run_id,
                              params=[Param(k, str(v)[:MAX_PARAM_VALUE]) for k, v in params.items()])
        if result.get("error"):
            self.client.set_tag(run.info.run_id, "curation.metarater.error", str(result["error"])[:5000])
        self.client.set_terminated(run.info.run_id, status="FAILED" if result.get("status") == "failed" else "FINISHED")


class CellRuns(ChildRuns):
    """One MLflow child run per finished cell of a job (``curate experiment=decide``: a candidate, model
    size and seed), under the Kedro hook's active run; a no-op without one."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.stage = kind  # ``decide/<metric>``, as the decide job's own ``decide_*_metrics``

    def __call__(self, name: str, params: dict[str, Any], metrics: dict[str, float]) -> None:  # type: ignore[override]
        if self.parent is None:
            return
        from mlflow.entities import Metric, Param

        run = self.client.create_run(self.parent.info.experiment_id, run_name=name,
                                     tags={"mlflow.parentRunId": self.parent.info.run_id, "curation.cell": self.kind})
        now = int(time.time() * 1000)
        self.client.log_batch(run.info.run_id,
                              metrics=[Metric(staged(self.stage, k), float(v), now, 0) for k, v in metrics.items()
                                       if np.isfinite(float(v))],
                              params=[Param(k, str(v)[:MAX_PARAM_VALUE]) for k, v in params.items()])
        self.client.set_terminated(run.info.run_id, status="FINISHED")
