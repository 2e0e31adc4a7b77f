"""MLflow metric names ``<stage>/<metric>`` (the run page groups its charts by the part before ``/``) and
artifact names (the file names on disk).

A node's ``ingest_metrics`` become ``ingest/rows_read``, ``ingest/rows_kept``, ...; its ``selection_history``
columns ``selection/joint``, ...; the hook's timings ``time/pipeline_seconds`` and ``time/<node>``; the run's disk
figures ``disk/outputs_bytes``. The stage is the output's first word, a few outputs being filed under the
pipeline that makes them (``document_stats_metrics`` under ``ingest``, ``embedding_metrics`` under ``scoring``).
Before issue #53 the same values were logged without a stage (``rows_kept``, ``node_seconds.<node>``,
``pipeline_seconds``, ``disk_outputs_bytes``): :func:`with_flat_columns` and :func:`history_key` let readers
address a metric by its name without the stage in stores of either kind.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

# An output's first word -> the stage its metrics are filed under.
ALIASES = {"document": "ingest", "embedding": "scoring", "tokenizer": "pretrain", "tokens": "pretrain",
           "corpus": "table2", "report": "reports"}
TIME = "time"
DISK = "disk"


def stage_of(output: str) -> str:
    """``selection_run_metrics`` -> ``selection``; ``document_stats_metrics`` -> ``ingest``."""
    first = output.split("_", 1)[0]
    return ALIASES.get(first, first)


def staged(output: str, key: str) -> str:
    """The MLflow name of metric ``key`` of node output ``output``: ``ingest/rows_kept``."""
    return f"{stage_of(output)}/{key}"


def node_seconds(node: str) -> str:
    return f"{TIME}/{node}"


PIPELINE_SECONDS = f"{TIME}/pipeline_seconds"


def unstaged(name: str) -> str:
    """``ingest/rows_kept`` -> ``rows_kept``; a name without a stage stays as it is."""
    _, sep, rest = name.partition("/")
    return rest if sep else name


def with_flat_columns(frame):
    """``mlflow.search_runs``' frame with a ``metrics.<metric>`` column beside each ``metrics.<stage>/<metric>``
    one (the first non-empty value where two stages share a metric name; a column already there is filled
    where empty): readers name a metric without its stage, in stores written before and after issue #53."""
    prefix = "metrics."
    added: dict[str, object] = {}
    for column in frame.columns:
        if not column.startswith(prefix):
            continue
        flat = prefix + unstaged(column[len(prefix):])
        if flat == column:
            continue
        current = added.get(flat, frame[flat] if flat in frame.columns else None)
        added[flat] = frame[column] if current is None else current.combine_first(frame[column])
    if not added:
        return frame
    import pandas as pd

    kept = frame.drop(columns=[c for c in added if c in frame.columns])
    return pd.concat([kept, pd.DataFrame(added, index=frame.index)], axis=1)  # at once: no fragmented frame


def history_key(key: str, names: Iterable[str]) -> str:
    """The name under which metric ``key`` (without its stage) was logged, among a run's metric ``names``:
    ``key`` itself (a store from before issue #53, or a name logged as is), else ``<stage>/<key>``."""
    names = list(names)
    if key in names:
        return key
    return next((name for name in names if "/" in name and unstaged(name) == key), key)


ARTIFACTS_TAG = "curation.artifacts"  # JSON: output name -> artifact path, for the outputs the run logged


def artifact_of(tags: Any, output: str, folder: str, suffix: str) -> str:
    """The artifact path of node output ``output`` in a run with ``tags`` (a dict, or a search_runs row): the one
    the run's ``curation.artifacts`` tag names, else ``<folder>/<output><suffix>`` (runs from before issue #53)."""
    try:
        raw = tags.get(ARTIFACTS_TAG, tags.get(f"tags.{ARTIFACTS_TAG}"))
        named = json.loads(raw) if isinstance(raw, str) and raw else {}
    except (ValueError, AttributeError):
        named = {}
    return str(named.get(output) or f"{folder}/{output}{suffix}")
