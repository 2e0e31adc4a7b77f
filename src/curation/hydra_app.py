"""``curate``: the Hydra application that runs Kedro pipelines.

    curate pipeline=ingest data.max_docs=2000
    curate -m data.max_docs=500,1000,2000      # one Kedro run (and MLflow child run) per job
    curate --cfg job                           # print the composed config

Hydra composes ``conf/config.yaml``; each job runs the requested pipeline(s)
in a real ``KedroSession`` with the composed config as its parameters.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from curation.config_loader import COMPOSED_KEY
from curation.paths import project_root
from curation.tracking.store import parent_run_from_env

log = logging.getLogger(__name__)


def pipeline_names(value: str) -> list[str]:
    names = [p.strip() for p in str(value).split("+") if p.strip()]
    if not names:
        raise ValueError("pipeline= names no pipeline")
    return names


def run_kedro(params: dict[str, Any], *, project_path: Path | None = None, env: str | None = None) -> dict[str, Any]:
    """Run ``params["pipeline"]`` in a fresh KedroSession with ``params`` as its parameters."""
    from kedro.framework.project import configure_project, pipelines
    from kedro.framework.session import KedroSession

    root = project_path or project_root()
    # preserve_logging: keep Hydra's job log handler (bootstrap_project would drop it).
    configure_project("curation", preserve_logging=True)
    names = pipeline_names(params.get("pipeline", "__default__"))
    # Kedro 1.x loads only the requested pipelines; ask for ours before looking them up.
    pipelines.set_requested(names)
    unknown = [n for n in names if n not in pipelines]
    if unknown:
        raise ValueError(f"pipeline={'+'.join(unknown)} is not a registered pipeline; known: {sorted(pipelines)}")
    if params.get("run", {}).get("input_namespace"):
        from kedro.pipeline import Pipeline

        combined = sum((pipelines[n] for n in names), start=Pipeline([]))
        params["run"]["free_inputs"] = sorted({i.split("@")[0] for i in combined.inputs() if not i.startswith("params:")})
    with KedroSession.create(project_path=root, env=env or params.get("kedro_env"),
                             runtime_params={COMPOSED_KEY: True, **params}) as session:
        return session.run(pipeline_names=names)


def job_params(cfg: DictConfig) -> dict[str, Any]:
    """The composed config as plain data, range-checked, with multirun job settings filled in.

    Composition already refused unknown keys and wrong types (every group has a
    schema); :func:`~curation.config_schema.validate_config` builds each group's
    dataclass, so an out-of-range knob fails here, before Kedro starts, naming
    the key, the value and the allowed range.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from curation.config_schema import validate_config

    params: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    validate_config(params)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        sweep_dir = Path(hydra_cfg.sweep.dir)
        # Keep sweep jobs' outputs apart (data/<layer>/multirun/<sweep>/<job>/), and read
        # what the job does not produce from the namespace the sweep started from.
        params["run"]["input_namespace"] = params["run"].get("input_namespace") or params["run"]["namespace"]
        params["run"]["namespace"] = (f"{params['run']['namespace']}/multirun/"
                                      f"{sweep_dir.parent.name}_{sweep_dir.name}/{hydra_cfg.job.num}")
        if not params["tracking"].get("parent_run_id"):
            params["tracking"]["parent_run_id"] = parent_run_from_env()
        params["tracking"]["tags"] = {**params["tracking"].get("tags", {}), "hydra.job.num": hydra_cfg.job.num}
    # The MLflow run is named after them (curation.tracking.naming.run_name).
    params["tracking"]["tags"] = {**params["tracking"].get("tags", {}),
                                  "hydra.overrides": " ".join(hydra_cfg.overrides.task)}
    return params


def _task(cfg: DictConfig) -> None:
    from curation.configuration import ConfigError

    try:
        params = job_params(cfg)
    except ConfigError as err:
        # The message names key, value and range; the parser's frames would only hide it.
        raise err.with_traceback(None) from None
    run_kedro(params)


def main() -> None:
    import hydra

    from curation.config_schema import register_configs

    register_configs()
    root = project_root()
    app = hydra.main(version_base="1.3", config_path=str(root / "conf"), config_name="config")(_task)
    app()


if __name__ == "__main__":  # python -m curation.hydra_app
    sys.exit(main())
