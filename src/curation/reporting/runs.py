"""Which recorded runs a report is built from (plain pandas over ``mlflow.search_runs``' frame)."""

from __future__ import annotations

import pandas as pd

RUN_MODES = ("latest_sweep", "all")


def in_namespace(runs: pd.DataFrame, namespace: str) -> pd.Series:
    """Which runs were recorded in ``namespace``: tag ``curation.namespace`` is the namespace or one of its
    sweeps' job namespaces (``<namespace>/multirun/<sweep>/<job>``); a run without the tag (recorded outside a
    pipeline run) belongs to every namespace."""
    tag = runs.get("tags.curation.namespace", pd.Series(None, index=runs.index, dtype=object))
    return tag.isna() | (tag == namespace) | tag.fillna("").str.startswith(f"{namespace}/multirun/")


def choose_runs(runs: pd.DataFrame, mode: str, namespace: str | None = None) -> pd.DataFrame:
    """Finished pipeline runs (not reports, not sweep parents), of ``namespace`` when given (two people, or two
    corpora, reproducing one artefact in one MLflow experiment under two namespaces get a report each from their
    own runs); ``latest_sweep``: the children of the most recent sweep, or the latest run when the experiment
    has no sweep; ``all``: every run."""
    if mode not in RUN_MODES:
        raise ValueError(f"report.runs must be 'latest_sweep' or 'all', got {mode!r}")
    if runs.empty:
        return runs
    pipelines = runs.get("tags.kedro.pipelines", pd.Series(None, index=runs.index)).fillna("")
    keep = runs[(pipelines != "") & ~pipelines.str.contains("reports") & (runs["status"] == "FINISHED")
                & (in_namespace(runs, namespace) if namespace is not None else True)]
    if mode == "all" or keep.empty:
        return keep.sort_values("start_time").reset_index(drop=True)
    parent = keep.get("tags.mlflow.parentRunId", pd.Series(None, index=keep.index))
    children = keep[parent.notna()]
    if children.empty:
        return keep.sort_values("start_time").tail(1).reset_index(drop=True)
    latest = children.sort_values("start_time")["tags.mlflow.parentRunId"].iloc[-1]
    return children[children["tags.mlflow.parentRunId"] == latest].sort_values("start_time").reset_index(drop=True)
