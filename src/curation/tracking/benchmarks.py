"""Record a benchmark run in MLflow: its CSV, its figure, its settings and headline numbers.

Benchmarks (``benchmarks/``) write CSV + PNG under ``benchmarks/results``; this
puts the same files into the project's MLflow store (experiment ``benchmarks``
by default) so they sit next to pipeline runs and the reports pipeline can read
them. The store is the one in ``conf/tracking/sqlite.yaml`` unless
``MLFLOW_TRACKING_URI`` says otherwise.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from curation.paths import project_root
from curation.tracking.store import params_for_mlflow, setup_experiment

DEFAULT_EXPERIMENT = "benchmarks"


def _tracking(experiment: str) -> dict[str, Any]:
    uri = os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlruns/mlflow.db")
    return {"uri": uri, "artifact_location": "mlruns/artifacts", "experiment_name": experiment}


def log_benchmark(
    name: str,
    *,
    files: Iterable[str | Path] = (),
    params: Optional[Mapping[str, Any]] = None,
    metrics: Optional[Mapping[str, float]] = None,
    tags: Optional[Mapping[str, str]] = None,
    experiment: str = DEFAULT_EXPERIMENT,
    root: Optional[Path] = None,
) -> str:
    """One finished MLflow run named ``name``; returns its run id.

    Non-finite metrics are skipped (MLflow rejects NaN in some stores) and
    listed in the ``skipped_metrics`` tag, so a missing number is visible.
    """
    import mlflow

    root = root or project_root()
    exp_id = setup_experiment(_tracking(experiment), root)
    finite = {k: float(v) for k, v in (metrics or {}).items() if v is not None and math.isfinite(float(v))}
    skipped = sorted(set(metrics or {}) - set(finite))
    all_tags = {"benchmark": name, **(tags or {})}
    if skipped:
        all_tags["skipped_metrics"] = ",".join(skipped)
    # The client API, not the fluent one: a benchmark may run inside another active run.
    client = mlflow.MlflowClient(tracking_uri=mlflow.get_tracking_uri())
    run = client.create_run(exp_id, run_name=name, tags=all_tags)
    run_id = run.info.run_id
    try:
        if params:
            from mlflow.entities import Param

            client.log_batch(run_id, params=[Param(k, v) for k, v in params_for_mlflow(params).items()])
        for key, value in finite.items():
            client.log_metric(run_id, key, value)
        for path in files:
            if Path(path).exists():
                client.log_artifact(run_id, str(path))
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status="FINISHED")
    return run_id
