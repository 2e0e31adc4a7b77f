"""Ingest nodes: validate the raw shards on shards (bounded memory, resumable), then compute
document statistics."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from curation.cache import config_key
from curation.data import ValidationConfig, document_statistics, source_statistics
from curation.paths import project_root
from curation.reporting.plots import plot_document_stats
from curation.shards import EngineConfig, ShardedDataset, ShardTask
from curation.shards.ingest import ingest_shards

log = logging.getLogger(__name__)

STAGING = Path("data") / "02_intermediate" / ".staging"  # per-run work folders of streaming stages


def raw_fingerprint(path: str, shard_ids: list[str]) -> str:
    """Fingerprint of the raw input: shard names, plus size and mtime of local files (hashing
    terabytes of text to name the input would cost a full read)."""
    parts: list[Any] = [path]
    for shard in shard_ids:
        local = Path(shard) if Path(shard).is_absolute() else Path(path) / shard
        try:
            st = os.stat(local if local.exists() else shard)
            parts.append((shard, st.st_size, st.st_mtime_ns))
        except OSError:
            parts.append(shard)
    return config_key(*parts)


def ingest_documents(
    raw_documents: dict[str, Callable[[], pd.DataFrame]], data: dict[str, Any], run: dict[str, Any] | None = None,
) -> tuple[ShardedDataset, ShardedDataset, dict[str, float]]:
    """Validate the shards in order (one at a time locally, or as Ray tasks with
    ``data.engine=ray``), stop at ``data.max_docs`` kept documents.

    Returns ``documents`` and ``rejected_documents`` as sharded datasets (one output shard per
    input shard; ``documents``: ``id, text`` + kept optional columns + ``category`` when ``extra``
    carries one; ``rejected``: ``id, reason, source_file``) and ``ingest_metrics`` (rows
    read/kept, dropped per reason, summed over shards). A run killed half-way resumes from its
    staging folder (per ``run.namespace``, so parallel sweep jobs never share one) and skips the
    shards it finished.
    """
    config = ValidationConfig(
        id_column=data["id_column"], text_column=data["text_column"], max_chars=data.get("max_chars"),
        keep_columns=tuple(data.get("keep_columns") or ()),
    )
    engine = EngineConfig(engine=data.get("engine") or "local", ray_address=data.get("ray_address"))
    buckets = int(data.get("dedup_buckets") or 16)
    raw_fp = raw_fingerprint(str(data.get("path", "")), list(raw_documents))
    key = config_key({k: v for k, v in data.items() if k not in ("engine", "ray_address")}, raw_fp)
    work = project_root() / STAGING / str((run or {}).get("namespace") or "default") / f"ingest-{key}"
    tasks = [ShardTask(shard_id, load) for shard_id, load in raw_documents.items()]
    result = ingest_shards(tasks, config, work_dir=work, max_docs=data.get("max_docs"), engine=engine,
                           num_buckets=buckets, inputs={"raw_documents": raw_fp})
    for scratch in ("validated", "kept_rows", "rejected_pass1", "buckets"):
        shutil.rmtree(work / scratch, ignore_errors=True)
    log.info("ingest: %s", result.metrics)
    return result.documents, result.rejected, result.metrics


def compute_document_statistics(
    documents: pd.DataFrame,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float], Any]:
    """Per-document and per-source statistics, headline metrics and a plot."""
    doc_stats = document_statistics(documents)
    if "category" in documents.columns:
        doc_stats["category"] = documents["category"].to_numpy()
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
