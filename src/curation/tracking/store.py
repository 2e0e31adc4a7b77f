"""Set up the MLflow store named in ``tracking``; shared by the hook and the sweep callback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from curation.errors import UserError

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


class TrackingStoreError(UserError):
    """The MLflow store cannot be used (read-only, not a database, locked by another process)."""


def check_store(uri: str, timeout_s: float = 2.0) -> None:
    """Fail in seconds, in one line, on a SQLite store MLflow cannot write: read-only, corrupt (not a database)
    or locked by another process. MLflow itself retries such a store for ~100 s and then prints a 100-200-line
    sqlalchemy trace that names neither ``tracking.uri`` nor how to run without tracking (issue #44). Other
    stores (a server, a folder) are left to MLflow."""
    import sqlite3

    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return
    path = Path(uri[len(prefix):])
    fix = "fix or move it, point tracking.uri at another store, or run without tracking: tracking.enabled=false"
    if not path.exists():
        if not os.access(path.parent, os.W_OK):
            raise TrackingStoreError(f"the MLflow store {path} (tracking.uri) cannot be created: its folder is not "
                                     f"writable; {fix}")
        return
    if not os.access(path, os.R_OK | os.W_OK) or not os.access(path.parent, os.W_OK):
        raise TrackingStoreError(f"the MLflow store {path} (tracking.uri) is read-only (the file or its folder); {fix}")
    try:
        con = sqlite3.connect(str(path), timeout=timeout_s)
    except sqlite3.Error as err:
        raise TrackingStoreError(f"the MLflow store {path} (tracking.uri) cannot be opened ({err}); {fix}") from None
    try:
        con.execute("select count(*) from sqlite_master").fetchone()
        con.execute("begin immediate")  # a write lock: what MLflow's first write needs
        con.rollback()
    except sqlite3.DatabaseError as err:
        text = str(err)
        what = (f"locked by another process for over {timeout_s:g} s" if "locked" in text or "busy" in text
                else "read-only" if "readonly" in text else f"not a usable SQLite database ({text})")
        raise TrackingStoreError(f"the MLflow store {path} (tracking.uri) is {what}; {fix}") from None
    finally:
        con.close()


def setup_experiment(tracking: Mapping[str, Any], root: Path) -> str:
    """Point MLflow at the configured store (checked first: :func:`check_store`); return the experiment id
    (created if new)."""
    import mlflow

    uri = resolve_uri(str(tracking["uri"]), root)
    check_store(uri)
    mlflow.set_tracking_uri(uri)
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
