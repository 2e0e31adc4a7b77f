"""Ingest validation on shards: bounded memory, resumable, same drops and counts as the
whole-frame pass (:func:`curation.data.validate.validate_documents` over a stream of shards).

Three steps, each per shard or per bucket, so none holds the corpus or a set of its ids:

1. **validate** (per input shard, local or Ray): every rule except ``duplicate_id``; the kept
   rows go to ``<work>/validated``, the rejections to ``<work>/rejected_pass1``, and the kept ids
   to hash buckets (:mod:`curation.shards.dedup`).
2. **dedup** (per bucket): later copies of an id, "first one wins" in shard-then-row order.
3. **finish** (per shard, local or Ray): drop those copies (counted ``dropped_duplicate_id``),
   apply ``max_docs``, add ``category``; write ``documents`` and ``rejected`` shards.

With ``max_docs`` the validate step reads shards in order only until enough documents are kept,
as the whole-frame loop does; shards past the cap are not read and not counted.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from curation.cache import config_key
from curation.data.validate import REASONS, ValidationConfig, validate_documents
from curation.shards.dedup import find_duplicates, partition_ids
from curation.shards.executor import EngineConfig, ShardResult, ShardTask, run_shards, sum_stats
from curation.shards.manifest import Manifest
from curation.shards.store import ShardedDataset, ShardWriter, shard_names

log = logging.getLogger(__name__)

INGEST_REMAKE = "curate pipeline=ingest"


@dataclass
class IngestResult:
    documents: ShardedDataset
    rejected: ShardedDataset
    metrics: dict[str, float]


def category(extra: pd.Series) -> pd.Series:
    """``category`` from the JSON ``extra`` column of the bundled corpus (None when absent)."""

    def one(value: Any) -> str | None:
        if not isinstance(value, str) or not value:
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed.get("category") if isinstance(parsed, dict) else None

    return extra.map(one).astype("string")


def _validate_shard(frame: pd.DataFrame, name: str, *, config: ValidationConfig, source: dict[str, str],
                    bucket_dir: str, shard_index: dict[str, int], num_buckets: int) -> ShardResult:
    kept, rejected, report = validate_documents(frame, config, source_name=source[name], check_duplicates=False,
                                                row_numbers=True)
    partition_ids(kept["id"], shard=name, shard_index=shard_index[name], bucket_dir=bucket_dir,
                  num_buckets=num_buckets)
    return ShardResult({"validated": kept, "rejected": rejected}, report.as_metrics())


def _load_validated(work: str, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (pd.read_parquet(Path(work) / "validated" / "shards" / f"{name}.parquet"),
            pd.read_parquet(Path(work) / "rejected_pass1" / "shards" / f"{name}.parquet"))


def _finish_shard(loaded: tuple[pd.DataFrame, pd.DataFrame], name: str, *, drops: dict[str, np.ndarray],
                  limits: dict[str, int], source: dict[str, str], pass1: dict[str, dict]) -> ShardResult:
    kept, rejected = loaded
    drop_rows = drops.get(name, np.empty(0, dtype=np.int64))
    is_dup = np.zeros(len(kept), dtype=bool)
    is_dup[drop_rows] = True
    dup_rejected = pd.DataFrame({
        "id": kept.loc[is_dup, "id"].astype("string"),
        "reason": pd.Series(["duplicate_id"] * int(is_dup.sum()), dtype="string", index=kept.index[is_dup]),
        "source_file": pd.Series([source[name]] * int(is_dup.sum()), dtype="string", index=kept.index[is_dup]),
        "_row": kept.loc[is_dup, "_row"],
    })
    rejected = pd.concat([rejected, dup_rejected], ignore_index=True).sort_values("_row", kind="stable")
    kept = kept[~is_dup]
    stats = dict(pass1[name])
    stats["dropped_duplicate_id"] = stats.get("dropped_duplicate_id", 0) + int(is_dup.sum())
    stats["rows_dropped"] = stats.get("rows_dropped", 0) + int(is_dup.sum())
    stats["rows_kept"] = stats["rows_kept"] - int(is_dup.sum())
    limit = limits.get(name)
    if limit is not None and len(kept) > limit:
        # Rows past the cap are not read, not dropped: report them as unread (as the whole-frame loop).
        surplus = len(kept) - limit
        kept = kept.iloc[:limit]
        stats["rows_kept"] -= surplus
        stats["rows_read"] -= surplus
    documents = kept.drop(columns="_row").reset_index(drop=True)
    if "extra" in documents.columns:
        documents["category"] = category(documents["extra"])
    return ShardResult({"documents": documents, "rejected": rejected.drop(columns="_row").reset_index(drop=True)},
                       stats)


def ingest_shards(
    tasks: Sequence[ShardTask],
    config: ValidationConfig,
    *,
    work_dir: str | Path,
    max_docs: int | None = None,
    engine: EngineConfig | None = None,
    num_buckets: int = 16,
    inputs: dict[str, str] | None = None,
) -> IngestResult:
    """Validate ``tasks`` (one per input shard, in stream order; ``task.name`` is the source file
    named in ``rejected.source_file``) into ``<work_dir>/documents`` and ``<work_dir>/rejected``.

    Re-running with the same ``work_dir`` skips every finished shard of every step.
    """
    work = Path(work_dir)
    engine = engine or EngineConfig()
    out_names = shard_names(len(tasks))
    source = {out: t.name for out, t in zip(out_names, tasks)}
    renamed = [ShardTask(out, t.load) for out, t in zip(out_names, tasks)]
    index = {n: i for i, n in enumerate(out_names)}
    validate = partial(_validate_shard, config=config, source=source, bucket_dir=str(work / "buckets"),
                       shard_index=index, num_buckets=num_buckets)
    pass1_outputs = {"validated": (work / "validated", "frame"), "rejected": (work / "rejected_pass1", "frame")}

    def pass1(upto: int) -> list[dict]:
        return run_shards(validate, renamed[:upto], pass1_outputs, engine, desc="ingest validate")

    def kept_after_dedup(stats: list[dict], drops: dict[int, np.ndarray]) -> list[int]:
        return [int(s["rows_kept"]) - len(drops.get(i, ())) for i, s in enumerate(stats)]

    if max_docs is None:
        read = len(renamed)
        stats = pass1(read)
        drops = find_duplicates(work / "buckets", out_names[:read], num_buckets)
    else:
        # Read shards in order until max_docs documents survive dedup. Pre-dedup counts bound the
        # post-dedup ones from above, so the (all-bucket) dedup pass runs only once they reach the cap.
        read, stats, drops = 0, [], {}
        batch = 1 if engine.engine == "local" else 2  # Ray: two shards per round keep both CPUs busy
        while read < len(renamed):
            read = min(len(renamed), read + batch)
            stats = pass1(read)
            if sum(int(s["rows_kept"]) for s in stats) < max_docs:
                continue
            drops = find_duplicates(work / "buckets", out_names[:read], num_buckets)
            if sum(kept_after_dedup(stats, drops)) >= max_docs:
                break
        else:
            drops = find_duplicates(work / "buckets", out_names[:read], num_buckets)
    kept_counts = kept_after_dedup(stats, drops)
    limits: dict[str, int] = {}
    used = read
    if max_docs is not None:
        total = 0
        for i, n in enumerate(kept_counts[:read]):
            if total >= max_docs:
                used = i
                break
            limits[out_names[i]] = max_docs - total
            total += n
    named_drops = {out_names[i]: rows for i, rows in drops.items() if i < used}
    pass1_stats = {out_names[i]: stats[i] for i in range(used)}
    finish = partial(_finish_shard, drops=named_drops, limits=limits, source=source, pass1=pass1_stats)
    final_tasks = [ShardTask(n, partial(_load_validated, str(work), n)) for n in out_names[:used]]
    outputs = {"documents": (work / "documents", "frame"), "rejected": (work / "rejected", "frame")}
    per_shard = run_shards(finish, final_tasks, outputs, engine, desc="ingest finish")
    digest = config_key(config.__dict__, max_docs, num_buckets)
    documents = ShardWriter(work / "documents").finalize(
        out_names[:used], stage="ingest", inputs=inputs, config_digest=digest, remake=INGEST_REMAKE)
    rejected = ShardWriter(work / "rejected").finalize(
        out_names[:used], stage="ingest", inputs=inputs, config_digest=digest, remake=INGEST_REMAKE,
        aligned_with=None)
    total = sum_stats(per_shard)
    metrics = {"rows_read": int(total.get("rows_read", 0)), "rows_kept": int(total.get("rows_kept", 0))}
    metrics.update({f"dropped_{r}": int(total.get(f"dropped_{r}", 0)) for r in REASONS})
    metrics["rows_dropped"] = sum(metrics[f"dropped_{r}"] for r in REASONS)
    metrics.update({"shards_read": used, "shards_total": len(tasks)})
    _check_counts(documents, metrics)
    return IngestResult(ShardedDataset(work / "documents"), ShardedDataset(work / "rejected"), metrics)


def _check_counts(documents: Manifest, metrics: dict[str, float]) -> None:
    if documents.rows != metrics["rows_kept"] or metrics["rows_read"] != metrics["rows_kept"] + metrics["rows_dropped"]:
        raise RuntimeError(f"ingest counts do not add up: {documents.rows} documents written, metrics {metrics}")
