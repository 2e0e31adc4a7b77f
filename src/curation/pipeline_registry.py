"""Project pipelines."""

from __future__ import annotations

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline

# The default job, in order; later issues append their pipelines here.
DEFAULT_PIPELINES = ("ingest", "scoring", "pruning", "selection")


def register_pipelines() -> dict[str, Pipeline]:
    # Kedro 1.x discovers only the pipelines a run asked for; __default__ is
    # built when the discovery loaded everything (it does when it is asked for).
    pipelines = find_pipelines(raise_errors=True)
    if all(name in pipelines for name in DEFAULT_PIPELINES):
        pipelines["__default__"] = sum((pipelines[name] for name in DEFAULT_PIPELINES), Pipeline([]))
    return pipelines
