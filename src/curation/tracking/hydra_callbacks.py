"""Hydra callbacks: one MLflow parent run per multirun sweep; the Table 2 report when its sweep ends.

Each job's Kedro run becomes a child of it (``mlflow.parentRunId``), so the
MLflow UI shows a sweep as one expandable row and its compare view lines the
jobs' params and metrics up. The parent run id reaches the jobs through an
environment variable, which both the basic launcher (same process) and the
joblib launcher (worker processes started after this callback) inherit.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from curation.paths import project_root
from curation.tracking.store import PARENT_RUN_ENV, params_for_mlflow, setup_experiment

log = logging.getLogger(__name__)


class MlflowSweepCallback(Callback):
    def __init__(self) -> None:
        self._run_id: str | None = None
        self._failed_jobs = 0

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        import mlflow
        from mlflow.entities import Param

        tracking = OmegaConf.to_container(config.tracking, resolve=True)
        if not tracking.get("enabled", True):
            return
        experiment_id = setup_experiment(tracking, project_root())
        overrides = list(config.hydra.overrides.task)
        sweeper_params = OmegaConf.to_container(config.hydra.sweeper, resolve=False) or {}
        client = mlflow.MlflowClient()
        run = client.create_run(
            experiment_id,
            run_name=tracking.get("run_name") or f"sweep {' '.join(overrides)}"[:250],
            tags={"curation.sweep": "true", "hydra.overrides": " ".join(overrides),
                  **{str(k): str(v) for k, v in (tracking.get("tags") or {}).items()}},
        )
        self._run_id = run.info.run_id
        params = params_for_mlflow({"sweep": {"overrides": " ".join(overrides), **sweeper_params}})
        client.log_batch(self._run_id, params=[Param(k, v) for k, v in params.items()])
        os.environ[PARENT_RUN_ENV] = self._run_id
        log.info("MLflow sweep parent run %s", self._run_id)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        if getattr(job_return, "status", None) == JobStatus.FAILED:
            self._failed_jobs += 1

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._run_id is None:
            return
        import mlflow

        client = mlflow.MlflowClient()
        children = mlflow.search_runs(
            experiment_ids=[client.get_run(self._run_id).info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self._run_id}'",
        )
        if len(children):
            keep = [c for c in children.columns if c.startswith(("metrics.", "params.", "tags.mlflow.runName"))
                    or c in ("run_id", "status")]
            varying = [c for c in keep if not c.startswith("params.") or children[c].nunique(dropna=False) > 1]
            client.log_text(self._run_id, children[varying].to_csv(index=False), "sweep_summary.csv")
        client.log_metric(self._run_id, "jobs", float(len(children)))
        failed = self._failed_jobs or int((children["status"] == "FAILED").sum()) if len(children) else 0
        client.log_metric(self._run_id, "jobs_failed", float(failed))
        client.set_terminated(self._run_id, status="FAILED" if failed else "FINISHED")
        os.environ.pop(PARENT_RUN_ENV, None)
        self._run_id = None


class Table2ReportCallback(Callback):
    """When the table2_tiny sweep ends, run the reports pipeline on its runs (a child of the sweep's run).

    Registered in ``conf/experiment/table2_tiny.yaml``. A failing report is logged, not raised, so the
    sweep's own MLflow run still closes.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from curation.hydra_app import run_kedro
        from curation.reporting.table2 import NAME

        params: dict[str, Any] = OmegaConf.to_container(
            OmegaConf.create({k: config[k] for k in config if k != "hydra"}), resolve=True)  # type: ignore[assignment]
        params["pipeline"] = "reports"
        params["report"] = {**params.get("report", {}), "experiment": NAME, "runs": "latest_sweep"}
        params["tracking"] = {**params["tracking"], "parent_run_id": os.environ.get(PARENT_RUN_ENV),
                              "run_name": f"{NAME} report"}
        try:
            run_kedro(params)
            log.info("%s report written to data/08_reporting/%s/%s/", NAME, params["run"]["namespace"], NAME)
        except Exception:  # noqa: BLE001 -- the sweep's results stay in MLflow; the report can be rebuilt
            log.exception("%s report failed; rebuild it with `curate experiment=%s pipeline=reports "
                          "hydra.mode=RUN`", NAME, NAME)
