"""What a sweep (``curate -m ...``) leaves and prints when it ends: ``sweep_summary.csv`` with one row per job,
the swept parameters first, and a table of each job's swept values against its key metrics, under the
parent run's name, id and URL and the CSV's path.

The key metrics are those of :data:`KEY_METRICS` the jobs logged (a selection sweep: the selected set's size,
mean quality and diversity, its seconds; an ingest sweep: the documents kept), then the run's seconds.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from curation.tracking.metric_names import PIPELINE_SECONDS, unstaged
from curation.tracking.naming import swept_keys
from curation.tracking.summary import DIVERSITY_KEYS

log = logging.getLogger(__name__)

CSV_NAME = "sweep_summary.csv"
KEY_METRICS = (
    "ingest/rows_kept",
    "scoring/quality_mean",
    "scoring/roc_auc_quality",
    "pruning/kept",
    "pruning/quality_mean_after",
    "selection/selected_size",
    "selection/selected_quality_mean",
    "selection/selected_pairwise_similarity",
    "selection/selected_facility_location",
    "selection/selected_disf",
    "selection/selection_seconds",
    "decide/decide_decided_pairs",
    "pretrain/val_loss",
)
MAX_KEY_METRICS = 6  # printed; the CSV has every metric


def _job_order(children: pd.DataFrame) -> pd.DataFrame:
    job = pd.to_numeric(children.get("tags.hydra.job.num", pd.Series(index=children.index, dtype=float)),
                        errors="coerce")
    return children.assign(_job=job).sort_values(["_job", "start_time"], kind="stable").drop(columns="_job")


def swept_columns(children: pd.DataFrame, overrides: Sequence[str]) -> list[str]:
    """``params.<key>`` of each swept key (in the order given), else of every param whose value differs."""
    columns = [f"params.{key}" for key in swept_keys(overrides) if f"params.{key}" in children]
    if "selection" in swept_keys(overrides) and "params.selection.method" in children:
        columns.append("params.selection.method")  # `selection=datamask,greedy` sweeps the method
    if not columns:
        columns = [c for c in children.columns if c.startswith("params.")
                   and not c.startswith(("params.run.namespace", "params.tracking."))
                   and children[c].nunique(dropna=False) > 1]
    return list(dict.fromkeys(columns))


def key_metric_columns(children: pd.DataFrame) -> list[str]:
    """The columns of :data:`KEY_METRICS` the jobs logged (by their names without a stage in runs from before
    issue #53), at most :data:`MAX_KEY_METRICS` with the run's seconds last."""
    present = []
    measures = set(children["params.selection.diversity"].dropna()) if "params.selection.diversity" in children else set()
    others = {f"selection/selected_{key}" for name, (key, _) in DIVERSITY_KEYS.items() if name not in measures}
    for metric in KEY_METRICS:
        if measures and metric in others:
            continue  # the diversity the jobs did not optimise
        for column in (f"metrics.{metric}", f"metrics.{unstaged(metric)}"):
            if column in children and children[column].notna().any():
                present.append(column)
                break
    seconds = next((c for c in (f"metrics.{PIPELINE_SECONDS}", "metrics.pipeline_seconds") if c in children), None)
    return present[:MAX_KEY_METRICS - 1] + ([seconds] if seconds else [])


def summary_frame(children: pd.DataFrame, overrides: Sequence[str]) -> pd.DataFrame:
    """One row per job (in job order): the swept params, the job number, run name and status, the key metrics,
    every other metric, the other params that differ between jobs, and the run id."""
    children = _job_order(children)
    swept = swept_columns(children, overrides)
    key = key_metric_columns(children)
    first = swept + [c for c in ("tags.hydra.job.num", "tags.mlflow.runName", "status") if c in children] + key
    metrics = sorted(c for c in children.columns if c.startswith("metrics.") and c not in first)
    params = [c for c in children.columns if c.startswith("params.") and c not in first
              and children[c].nunique(dropna=False) > 1]
    return children[first + metrics + params + ["run_id"]].reset_index(drop=True)


def write_csv(table: pd.DataFrame, sweep_dir: str | None) -> Path | None:
    """``<sweep dir>/sweep_summary.csv`` (Hydra's ``multirun/<date>/<time>/``), or None when it cannot be written."""
    if not sweep_dir:
        return None
    path = Path(sweep_dir) / CSV_NAME
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False)
    except OSError as exc:
        log.warning("could not write %s: %s", path, exc)
        return None
    return path


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if value == int(value) and abs(value) < 1e15 else f"{value:.4g}"
    return str(value)


def print_sweep(parent: Any, children: pd.DataFrame, overrides: Sequence[str], csv_path: Path | None,
                tracking_uri: str, status: str, console: Any = None) -> None:
    """The sweep's closing lines: its parent run (name, id, URL), its CSV, and one row per job."""
    import sys

    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from curation.paths import project_root
    from curation.tracking.summary import relative
    from curation.tracking.ui import run_url, ui_address

    jobs = _job_order(children) if len(children) else children
    failed = int((jobs["status"] == "FAILED").sum()) if len(jobs) else 0
    table, width = None, 120
    if len(jobs):
        swept = swept_columns(jobs, overrides)
        key = key_metric_columns(jobs)
        header = ["job", *(c.removeprefix("params.") for c in swept), *(unstaged(c.removeprefix("metrics."))
                                                                      for c in key), "status"]
        rows = [[_cell(job.get("tags.hydra.job.num")), *(_cell(job.get(c)) for c in swept),
                 *(_cell(job.get(c)) for c in key), str(job.get("status", ""))] for _, job in jobs.iterrows()]
        table = Table(*header, box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, pad_edge=False)
        for row in rows:
            table.add_row(*row)
        width = max(width, sum(max(len(c) for c in column) + 3 for column in zip(header, *rows)) + 2)
    if console is None:  # a log file or a pipe: wide enough for the table (headers unwrapped); a terminal its own
        console = Console(width=None if sys.stdout.isatty() else width)
    console.print(f"[bold]sweep {status.lower()}[/bold]: {len(jobs)} jobs" + (f", {failed} failed" if failed else ""))
    if table is not None:
        console.print(table)
    rows = [("parent run", f"{parent.info.run_name}  ({parent.info.run_id})")]
    if csv_path is not None:
        rows.append(("sweep CSV", f"{relative(str(csv_path), project_root())} (also the parent run's artifact "
                                  f"{CSV_NAME}; swept parameters first)"))
    else:
        rows.append(("sweep CSV", f"the parent run's artifact {CSV_NAME}"))
    address = ui_address(tracking_uri, parent.info.run_id)
    if address is not None:
        if address.command:
            rows.append(("open the UI", address.command))
        rows.append(("this sweep", run_url(address.base, parent.info.experiment_id, parent.info.run_id)))
    width = max(len(k) for k, _ in rows)
    console.print("[bold]MLflow[/bold]")
    for label, value in rows:
        console.print(f"  [cyan]{escape(label):<{width}}[/cyan]  {escape(value)}", soft_wrap=True, highlight=False)
