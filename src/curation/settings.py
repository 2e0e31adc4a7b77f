"""Kedro project settings."""

from curation.telemetry import disable as _disable_telemetry

_disable_telemetry()  # before Kedro, MLflow or the Hub load: nothing phones home (curation.telemetry)

from curation.config_loader import HydraConfigLoader
from curation.runtime_hooks import InputsHook, RuntimeHook
from curation.tracking.hooks import MlflowTrackingHook

# pluggy calls the last registered hook first: InputsHook refuses a run whose inputs are missing before
# MlflowTrackingHook takes the namespace lock and opens an MLflow run.
HOOKS = (RuntimeHook(), MlflowTrackingHook(), InputsHook())

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
