"""Project pipelines."""

from __future__ import annotations

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline

# The default job, in order; later issues append their pipelines here.
DEFAULT_PIPELINES = ("ingest",)


def register_pipelines() -> dict[str, Pipeline]:
    pipelines = find_pipelines(raise_errors=True)
    pipelines["__default__"] = sum((pipelines[name] for name in DEFAULT_PIPELINES), Pipeline([]))
    return pipelines
