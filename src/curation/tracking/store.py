"""Set up the MLflow store named in ``tracking``; shared by the hook and the sweep callback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

PARENT_RUN_ENV = "CURATION_MLFLOW_PARENT_RUN_ID"
MAX_PARAM_VALUE = 6000  # MLflow's limit for one param value
# The experiment's kind: "custom_model_development" ("Machine learning" in the UI's ExperimentKind enum).
# Earlier MLflow 3 UIs opened such an experiment on its runs table; MLflow 3.17.2's UI ignores the tag and
# opens every experiment in the view of the browser's GenAI / Model training toggle (docs/running.md,
# scripts/check_mlflow_landing.py). Kept: the kind is still what the experiment holds.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def resolve_uri(uri: str, root: Path) -> str:
    """Anchor a relative ``sqlite:///rel/path.db`` at the project root (Hydra may change the cwd)."""
    prefix = "sqlite:///"
    if uri.startswith(prefix):
        rest = uri[len(prefix):]
        if not rest.startswith("/"):
            path = (root / rest).resolve()
            path.parent.mkdir(parents=True, exist_ok=True)
            return prefix + str(path)
        Path(rest).parent.mkdir(parents=True, exist_ok=True)
    return uri


def resolve_artifact_location(location: str, root: Path) -> str:
    if "://" in location:
        return location
    path = Path(location)
    if not path.is_absolute():
        path = root / path
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve().as_uri()


def setup_experiment(tracking: Mapping[str, Any], root: Path) -> str:
    """Point MLflow at the configured store; return the experiment id (created if new)."""
    import mlflow

    mlflow.set_tracking_uri(resolve_uri(str(tracking["uri"]), root))
    name = str(tracking.get("experiment_name") or "curation")
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        try:
            experiment_id = mlflow.create_experiment(
                name, artifact_location=resolve_artifact_location(str(tracking["artifact_location"]), root),
                tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
            )
        except Exception:  # another process of the same sweep created it first
            experiment = mlflow.get_experiment_by_name(name)
            if experiment is None:
                raise
            experiment_id = experiment.experiment_id
    else:
        experiment_id = experiment.experiment_id
    if experiment is not None and EXPERIMENT_KIND_TAG not in (experiment.tags or {}):
        # Stores made before the tag existed (or by MLflow itself) get it on their next run;
        # a kind the user chose in the UI is kept.
        mlflow.MlflowClient().set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment_id


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"data": {"max_docs": 5}}`` -> ``{"data.max_docs": 5}``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, prefix=f"{name}."))
        else:
            out[name] = value
    return out


def params_for_mlflow(config: Mapping[str, Any]) -> dict[str, str]:
    params = {}
    for key, value in flatten(config).items():
        text = "null" if value is None else str(value)
        params[key] = text if len(text) <= MAX_PARAM_VALUE else text[: MAX_PARAM_VALUE - 3] + "..."
    return params


def parent_run_from_env() -> str | None:
    return os.environ.get(PARENT_RUN_ENV) or None
