"""MLflow run names that say what ran: ``selection datamask lam=0.3``, ``default datamask max_docs=500 #2``,
a sweep's parent ``sweep selection datamask lam=0.1,0.3,0.5``.

The name is the pipeline(s), the selection method when a selection runs, and the
overrides the user gave (Hydra's command-line overrides, or ``kedro run --params``),
shortened to their last key. The full overrides stay in the ``hydra.overrides`` tag.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

# Pipelines that run a selection method (their run name carries selection.method).
SELECTING = {"__default__", "selection", "table2"}
# Overrides that say where or how a run is recorded, not what it computes.
_SKIP_PREFIXES = ("pipeline=", "tracking.", "hydra.", "kedro_env=", "run.namespace=")
MAX_NAME = 250  # MLflow's limit is 500; the runs table shows far less


def _short(override: str) -> str:
    key, _, value = override.lstrip("+~").partition("=")
    if "/" in value and not value.startswith("${"):
        value = value.rstrip("/").rsplit("/", 1)[-1]  # a path: its last part is enough to tell runs apart
    if len(value) > 40:
        value = value[:37] + "..."
    return f"{key.rsplit('.', 1)[-1]}={value}" if value else key.rsplit(".", 1)[-1]


def run_name(pipelines: Iterable[str], params: Mapping[str, Any], overrides: Iterable[str] = (),
             job_num: Any = None) -> str:
    names = [p or "__default__" for p in pipelines]
    parts = ["+".join("default" if n == "__default__" else n for n in names)]
    method = (params.get("selection") or {}).get("method")
    if method and SELECTING & set(names):
        parts.append(str(method))
    for override in overrides:
        if not override or override.startswith(_SKIP_PREFIXES):
            continue
        if method and override in (f"selection={method}",):
            continue  # already in the name
        parts.append(_short(override))
    if job_num not in (None, ""):
        parts.append(f"#{job_num}")
    return " ".join(parts)[:MAX_NAME]


def overrides_from(tags: Mapping[str, Any], runtime_params: Mapping[str, Any] | None, composed_key: str) -> list[str]:
    """The user's overrides: Hydra's (a tag set by ``curate``) or ``kedro run --params`` ones."""
    if tags.get("hydra.overrides") is not None:
        return [o for o in str(tags["hydra.overrides"]).split(" ") if o]
    if runtime_params and not runtime_params.get(composed_key):
        from curation.tracking.store import flatten

        return [f"{k}={v}" for k, v in flatten(runtime_params).items()]
    return []


def sweep_name(overrides: Iterable[str], params: Mapping[str, Any]) -> str:
    """A sweep's parent run: ``sweep`` and what :func:`run_name` says of its jobs, the swept values as given
    (``lam=0.1,0.3,0.5``); where or how it is recorded (``tracking.uri=...``) is left out, as for a job."""
    overrides = list(overrides)
    pipelines = next((o.partition("=")[2] for o in overrides if o.startswith("pipeline=")), None)
    names = [pipelines] if pipelines and "," in pipelines else \
        str(pipelines or params.get("pipeline") or "__default__").split("+")
    if "selection" in swept_keys(overrides):
        params = {**params, "selection": {}}  # the methods are in the swept override: selection=datamask,greedy
    return f"sweep {run_name(names, params, overrides)}"[:MAX_NAME]


def swept_keys(overrides: Iterable[str]) -> list[str]:
    """The keys a sweep varies, in the order given: ``selection.lam=0.1,0.3`` -> ``selection.lam`` (Hydra's
    sweep syntax: a comma list, ``range(...)``, ``choice(...)``, ``glob(...)``)."""
    keys = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if "," in value or value.startswith(("range(", "choice(", "glob(", "interval(")):
            keys.append(key)
    return keys
