"""Ingest nodes: validate the raw shards, then compute document statistics."""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

import pandas as pd
from tqdm.auto import tqdm

from curation.data import ValidationConfig, ValidationReport, document_statistics, source_statistics, validate_documents
from curation.reporting.plots import plot_document_stats

log = logging.getLogger(__name__)


def _category(extra: pd.Series) -> pd.Series:
    def one(value: Any) -> str | None:
        if not isinstance(value, str) or not value:
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed.get("category") if isinstance(parsed, dict) else None

    return extra.map(one).astype("string")


def ingest_documents(
    raw_documents: dict[str, Callable[[], pd.DataFrame]], data: dict[str, Any]
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Read shards in order, validate, stop at ``data.max_docs`` kept documents.

    Returns ``documents`` (``id, text`` + kept optional columns + ``category``
    when ``extra`` carries one), ``rejected_documents`` (``id, reason,
    source_file``) and ``ingest_metrics`` (rows read/kept, dropped per reason).
    """
    config = ValidationConfig(
        id_column=data["id_column"], text_column=data["text_column"], max_chars=data.get("max_chars"),
        keep_columns=tuple(data.get("keep_columns") or ()),
    )
    max_docs = data.get("max_docs")
    if max_docs is not None and (isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1):
        raise ValueError(f"data.max_docs must be a positive integer or null (all documents), got {max_docs!r}")
    seen: set[str] = set()
    kept_parts, rejected_parts, report = [], [], ValidationReport()
    kept_total, shards_read = 0, 0
    for shard_id, load in tqdm(raw_documents.items(), desc="ingest shards", unit="shard"):
        if max_docs is not None and kept_total >= max_docs:
            break
        kept, rejected, shard_report = validate_documents(load(), config, source_name=shard_id, seen_ids=seen)
        if max_docs is not None and kept_total + len(kept) > max_docs:
            # Rows past the cap are not read, not dropped: report them as unread.
            surplus = kept_total + len(kept) - max_docs
            kept = kept.iloc[: len(kept) - surplus]
            shard_report.rows_kept -= surplus
            shard_report.rows_read -= surplus
        kept_parts.append(kept)
        rejected_parts.append(rejected)
        report = report + shard_report
        kept_total += len(kept)
        shards_read += 1
    documents = pd.concat(kept_parts, ignore_index=True)
    if "extra" in documents.columns:
        documents["category"] = _category(documents["extra"])
    rejected = pd.concat(rejected_parts, ignore_index=True)
    metrics = {**report.as_metrics(), "shards_read": shards_read, "shards_total": len(raw_documents)}
    log.info("ingest: %s", metrics)
    return documents, rejected, metrics


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
