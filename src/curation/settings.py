"""Kedro project settings."""

import sys

from curation.telemetry import disable as _disable_telemetry

_disable_telemetry()  # before Kedro, MLflow or the Hub load: nothing phones home (curation.telemetry)

from curation.config_loader import CurationContext, HydraConfigLoader
from curation.runtime_hooks import InputsHook, RuntimeHook
from curation.tracking.hooks import MlflowTrackingHook

# pluggy calls the last registered hook first: InputsHook refuses a run whose inputs are missing before
# MlflowTrackingHook takes the namespace lock and opens an MLflow run.
HOOKS = (RuntimeHook(), MlflowTrackingHook(), InputsHook())

# every params: input of every pipeline is in the catalog, a note where an experiment-only block is unset
CONTEXT_CLASS = CurationContext

CONFIG_LOADER_CLASS = HydraConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # Parameters come from the Hydra tree (conf/config.yaml), never from
    # conf/*/parameters*.yml: an empty pattern list keeps a stray file out.
    "config_patterns": {"parameters": []},
}

# kedro-viz's run hook only records workflow events for its UI and warns on
# every Hydra job; `kedro viz` itself does not need it.
DISABLE_HOOKS_FOR_PLUGINS = ("kedro-viz",)


def no_kedro_viz_update_check() -> None:
    """kedro-viz answers "the installed version" when asked for its latest, without asking PyPI.

    ``kedro viz run`` asks PyPI for kedro-viz's latest version at start and for every page's ``/api/version``;
    offline the answer is ``None``, which kedro-viz 12.5 compares as the string "None" and shows as a
    "Kedro-Viz None is here!" banner over the flowchart. kedro-viz is pinned (pyproject.toml), so an upgrade
    banner is nothing a user of the project should act on: the check is answered here, with no connection.
    """
    from kedro_viz import __version__
    from packaging.version import parse

    import kedro_viz.integrations.pypi as pypi

    def installed():
        return parse(__version__)

    pypi.get_latest_version = installed
    # imported before this ran: its own name for the function (`from ... import get_latest_version`)
    version = sys.modules.get("kedro_viz.api.rest.responses.version")
    if version is not None:
        version.get_latest_version = installed


# kedro-viz 12.5 subclasses FastAPI's ORJSONResponse (kedro_viz/api/rest/responses/utils.py), which FastAPI now
# deprecates: importing kedro_viz.api.apps prints a FastAPIDeprecationWarning a user of the project can do nothing
# about (kedro-viz's code, pinned in pyproject.toml). Only that warning is silenced, only under `kedro viz`: its
# message, category (FastAPIDeprecationWarning is a UserWarning) and the kedro-viz module that triggers it.
KEDRO_VIZ_ORJSON_WARNING = "ignore:ORJSONResponse is deprecated:UserWarning:kedro_viz.api.apps"


def quiet_kedro_viz_orjson_warning() -> None:
    """Ignore kedro-viz's own FastAPIDeprecationWarning (ORJSONResponse) here and in the server process
    `kedro viz run` spawns: that process imports kedro_viz.api.apps before it loads the project (so before these
    settings), and takes its warning filters from PYTHONWARNINGS, which it inherits."""
    import os
    import warnings

    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated", category=UserWarning,
                            module=r"kedro_viz\.")
    current = os.environ.get("PYTHONWARNINGS", "")
    if KEDRO_VIZ_ORJSON_WARNING not in current.split(","):
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, (current, KEDRO_VIZ_ORJSON_WARNING)))


# `kedro viz run` serves from a spawned process (sys.argv the same), which imports these settings when it loads the
# project, after the version route: no_kedro_viz_update_check replaces the route's own name for the function too
if "kedro" in sys.argv[0] and sys.argv[1:2] == ["viz"]:
    no_kedro_viz_update_check()
    quiet_kedro_viz_orjson_warning()
