"""Ingest nodes: validate the raw shards on shards (bounded memory, resumable), then compute
document statistics."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from curation.data import source_statistics
from curation.data.stats import document_statistics_shards
from curation.paths import decontamination_index_dir, project_root
from curation.reporting.plots import plot_document_stats
from curation.shards import ShardedDataset
from curation.data.ingest import dedup_settings, ingest_corpus
from curation.shards.work import engine_of

log = logging.getLogger(__name__)

STAGING = Path("data") / "02_intermediate" / ".staging"  # per-run work folders of streaming stages


def ingest_documents(
    raw_documents: dict[str, Callable[[], pd.DataFrame]], data: dict[str, Any], run: dict[str, Any] | None = None,
    evaluation: dict[str, Any] | None = None,
) -> tuple[ShardedDataset, ShardedDataset, dict[str, float]]:
    """Validate, decontaminate and deduplicate the shards (:func:`curation.data.ingest.ingest_corpus`);
    return ``documents`` and ``rejected_documents`` as sharded datasets (one output shard per input shard;
    ``documents``: ``id, text`` + kept optional columns + ``category``; ``rejected``: ``id, reason,
    source_file, row, line, duplicate_of, task``) and ``ingest_metrics`` (rows read/kept, dropped per
    reason, summed over shards). The decontamination tasks default to ``eval.tasks``. Staging per
    ``run.namespace`` so parallel sweep jobs never share one."""
    namespace = str((run or {}).get("namespace") or "default")
    evaluation = evaluation or {}
    dedup = dedup_settings(data, tasks=list(evaluation.get("tasks") or ()), data_dir=evaluation.get("data_dir"),
                           index_dir=decontamination_index_dir())
    result = ingest_corpus(raw_documents, data, work_root=project_root() / STAGING, namespace=namespace,
                           dedup=dedup)
    return result.documents, result.rejected, result.metrics


def compute_document_statistics(
    documents: ShardedDataset, data: dict[str, Any] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float], Any]:
    """Per-document and per-source statistics (per shard, on the ``data`` group's engine:
    ``data.workers`` processes or Ray), headline metrics and a plot."""
    doc_stats = document_statistics_shards(documents, engine_of(data))
    table = source_statistics(doc_stats)
    overall = table[table["source"] == "__all__"].iloc[0]
    metrics = {
        "docs": float(overall["docs"]),
        "chars_total": float(overall["chars"]),
        "words_total": float(overall["words"]),
        "chars_mean": float(overall["mean_chars"]),
        "chars_median": float(overall["median_chars"]),
        "non_alpha_frac_mean": float(overall["mean_non_alpha_frac"]),
        "sources": float(len(table) - 1),
    }
    for _, row in table[table["source"] != "__all__"].iterrows():
        metrics[f"share_source_{row['source']}"] = float(row["share"])
    return doc_stats, table, metrics, plot_document_stats(doc_stats)
