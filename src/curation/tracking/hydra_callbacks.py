"""Hydra callbacks: one MLflow parent run per multirun sweep; the Table 2 report when its sweep ends.

Each job's Kedro run becomes a child of it (``mlflow.parentRunId``), so the
MLflow UI shows a sweep as one expandable row and its compare view lines the
jobs' params and metrics up. The parent run id reaches the jobs through an
environment variable, which both the basic launcher (same process) and the
joblib launcher (worker processes started after this callback) inherit.
When the sweep ends, the parent gets ``sweep_summary.csv`` (one row per job, the swept parameters first;
also written to the sweep's folder, ``multirun/<date>/<time>/``) and the sweep prints its parent run, the
CSV and a table of each job's swept values against its key metrics (:mod:`curation.tracking.sweep_summary`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from curation.paths import project_root
from curation.tracking.naming import sweep_name
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
        what = {"pipeline": OmegaConf.select(config, "pipeline", default=None),
                "selection": {"method": OmegaConf.select(config, "selection.method", default=None)}}
        run = client.create_run(
            experiment_id,
            run_name=tracking.get("run_name") or sweep_name(overrides, what),
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

        from curation.tracking import sweep_summary

        client = mlflow.MlflowClient()
        parent = client.get_run(self._run_id)
        children = mlflow.search_runs(
            experiment_ids=[parent.info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self._run_id}'",
        )
        overrides = list(config.hydra.overrides.task)
        csv_path = None
        if len(children):
            table = sweep_summary.summary_frame(children, overrides)
            csv_path = sweep_summary.write_csv(table, OmegaConf.select(config, "hydra.sweep.dir", default=None))
            if csv_path is not None:
                client.log_artifact(self._run_id, str(csv_path))
            else:
                client.log_text(self._run_id, table.to_csv(index=False), sweep_summary.CSV_NAME)
        client.log_metric(self._run_id, "sweep/jobs", float(len(children)))
        failed = self._failed_jobs or (int((children["status"] == "FAILED").sum()) if len(children) else 0)
        client.log_metric(self._run_id, "sweep/jobs_failed", float(failed))
        status = "FAILED" if failed else "FINISHED"
        client.set_terminated(self._run_id, status=status)
        try:
            sweep_summary.print_sweep(parent, children, overrides, csv_path, mlflow.get_tracking_uri(), status)
        except Exception as exc:  # noqa: BLE001 -- the record is what matters; the printout is a convenience
            log.warning("could not print the sweep's summary: %s", exc)
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
