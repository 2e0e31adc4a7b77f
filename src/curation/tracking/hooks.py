"""A Kedro hook that records every pipeline run as one MLflow run.

What a run gets, by the name of a node output:

``*_metrics``  dict of numbers -> ``mlflow.log_metrics``
``*_history``  DataFrame with a ``step`` column -> one metric series per column
``*_plot``     matplotlib Figure -> ``plots/<name>.png`` artifact
``*_plots``    dict of name -> Figure -> ``plots/<name>/<key>.png`` artifacts
``*_table``    DataFrame -> ``tables/<name>.csv`` artifact

Params: the whole composed config, flattened (``data.max_docs``). Under a
Hydra sweep the run is a child of the sweep's parent run
(``tracking.parent_run_id``). We use a small hook rather than kedro-mlflow:
kedro-mlflow 2.0.3 needs ``nested: False`` under Hydra sweeps and its own
``mlflow.yml``, i.e. a second place for settings that ``conf/`` already holds.
"""

from __future__ import annotations

import logging
import math
import time
from numbers import Number
from typing import Any

from kedro.framework.hooks import hook_impl

from curation.paths import project_root
from curation.tracking.store import params_for_mlflow, parent_run_from_env, setup_experiment

log = logging.getLogger(__name__)


def _finite(items: Any) -> list[tuple[str, float]]:
    return [(str(k), float(v)) for k, v in items
            if isinstance(v, Number) and not isinstance(v, bool) and math.isfinite(float(v))]


def _base_name(dataset_name: str) -> str:
    return dataset_name.rsplit(".", 1)[-1]


class MlflowTrackingHook:
    def __init__(self) -> None:
        self._context = None
        self._reset()

    def _reset(self) -> None:
        # Hook objects live as long as the process: a multirun reuses this one
        # across jobs, so everything run-specific is cleared per pipeline run.
        self._run_id: str | None = None
        self._started = 0.0
        self._owns_run = False

    @hook_impl
    def after_context_created(self, context: Any) -> None:
        self._context = context

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        import mlflow

        self._reset()
        params = self._context.params if self._context is not None else {}
        tracking = params.get("tracking") or {}
        if not tracking.get("enabled", True):
            return
        root = project_root() if self._context is None else self._context.project_path
        experiment_id = setup_experiment(tracking, root)
        names = run_params.get("pipeline_names") or [run_params.get("pipeline_name") or "__default__"]
        run_name = tracking.get("run_name") or "+".join(n or "__default__" for n in names)
        parent = tracking.get("parent_run_id") or parent_run_from_env()
        tags = {
            "kedro.session_id": str(run_params.get("session_id")),
            "kedro.pipelines": ",".join(n or "__default__" for n in names),
            "curation.namespace": str((params.get("run") or {}).get("namespace", "default")),
            **{str(k): str(v) for k, v in (tracking.get("tags") or {}).items()},
        }
        nested = mlflow.active_run() is not None
        run = mlflow.start_run(experiment_id=experiment_id, run_name=run_name, nested=nested,
                               parent_run_id=parent, tags=tags)
        self._run_id = run.info.run_id
        self._owns_run = True
        self._started = time.perf_counter()
        client = mlflow.MlflowClient()
        items = list(params_for_mlflow(params).items())
        from mlflow.entities import Param

        for start in range(0, len(items), 100):
            client.log_batch(self._run_id, params=[Param(k, v) for k, v in items[start:start + 100]])
        log.info("MLflow run %s in experiment %s (%s)", self._run_id, tracking.get("experiment_name"),
                 mlflow.get_tracking_uri())

    @hook_impl
    def after_node_run(self, node: Any, outputs: dict[str, Any]) -> None:
        if self._run_id is None:
            return
        import mlflow
        from mlflow.entities import Metric

        client = mlflow.MlflowClient()
        now = int(time.time() * 1000)
        for name, value in outputs.items():
            base = _base_name(name)
            if base.endswith("_metrics") and isinstance(value, dict):
                metrics = [Metric(k, v, now, 0) for k, v in _finite(value.items())]
                for start in range(0, len(metrics), 1000):
                    client.log_batch(self._run_id, metrics=metrics[start:start + 1000])
            elif base.endswith("_history") and hasattr(value, "iterrows") and "step" in value:
                metrics = [Metric(k, v, now, int(row["step"]))
                           for _, row in value.iterrows() for k, v in _finite(row.items()) if k != "step"]
                for start in range(0, len(metrics), 1000):
                    client.log_batch(self._run_id, metrics=metrics[start:start + 1000])
            elif base.endswith("_plot") and hasattr(value, "savefig"):
                client.log_figure(self._run_id, value, f"plots/{base}.png")
            elif base.endswith("_plots") and isinstance(value, dict):
                for key, figure in value.items():
                    if hasattr(figure, "savefig"):
                        client.log_figure(self._run_id, figure, f"plots/{base}/{key}.png")
            elif base.endswith("_table") and hasattr(value, "to_csv"):
                client.log_text(self._run_id, value.to_csv(index=False), f"tables/{base}.csv")

    def _end(self, status: str) -> None:
        if self._run_id is None or not self._owns_run:
            return
        import mlflow

        mlflow.MlflowClient().log_metric(self._run_id, "pipeline_seconds", time.perf_counter() - self._started)
        active = mlflow.active_run()
        if active is not None and active.info.run_id == self._run_id:
            mlflow.end_run(status=status)
        else:
            mlflow.MlflowClient().set_terminated(self._run_id, status=status)
        self._reset()

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        self._end("FINISHED")

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        self._end("FAILED")
