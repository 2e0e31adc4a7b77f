"""Ingest validation on shards: bounded memory, resumable, same drops and counts as the
whole-frame pass (:func:`curation.data.validate.validate_documents` over a stream of shards).

Three steps, each per shard or per bucket, so none holds the corpus or a set of its ids:

1. **validate** (per input shard, local or Ray): every rule except ``duplicate_id``; the kept
   rows go to ``<work>/validated``, the rejections to ``<work>/rejected_pass1``, and the kept ids
   to hash buckets (:mod:`curation.shards.dedup`).
2. **dedup** (per bucket): later copies of an id, "first one wins" in shard-then-row order.
3. **finish**: shards with copies to drop (counted ``dropped_duplicate_id``) or cut by
   ``max_docs`` are rewritten (per shard, local or Ray); every other validated shard is already
   in the final format and is adopted by a hard link (no second read or write of its text).

With ``max_docs`` the validate step reads shards in order only until enough documents are kept,
as the whole-frame loop does; shards past the cap are not read and not counted.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from curation.cache import config_key
from curation.data.validate import LINE, REASONS, ValidationConfig, validate_documents
from curation.data.textdedup import DEDUP_REASONS, DedupSettings, find_text_drops, pass1 as dedup_pass1
from curation.data.pieces import ROW_OFFSET, CorpusMemoryError, memory_message, out_of_memory, source_file
from curation.errors import EmptyCorpusError, UserError
from curation.shards.dedup import find_duplicates, partition_ids
from curation.shards.executor import EngineConfig, ShardResult, ShardTask, engine_from_data, run_shards, sum_stats
from curation.shards.manifest import Manifest
from curation.shards.store import ShardedDataset, ShardWriter, shard_names

log = logging.getLogger(__name__)

INGEST_REMAKE = "curate pipeline=ingest"
ENGINE_KEYS = ("engine", "ray_address", "workers")  # how the shards run, not what they hold: not in the key


@dataclass
class IngestResult:
    documents: ShardedDataset
    rejected: ShardedDataset
    metrics: dict[str, float]


def category(extra: pd.Series) -> pd.Series:
    """``category`` from the ``extra`` column (None when absent): :func:`category_counted` without the count."""
    return category_counted(extra)[0]


def category_counted(extra: pd.Series) -> tuple[pd.Series, int]:
    """``category`` from the ``extra`` column of the bundled corpus (a JSON object as a string, or a parquet
    struct: a dict), None when absent; and how many non-empty values could not be read as an object
    (invalid JSON, or JSON that is not an object): counted (``extra_unreadable``) rather than left as
    ``category=None`` without a word (issue #52)."""
    unreadable = 0

    def one(value: Any) -> str | None:
        nonlocal unreadable
        if isinstance(value, dict):
            found = value.get("category")
            return found if isinstance(found, str) else None
        if not isinstance(value, str) or not value:
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            unreadable += 1
            return None
        if not isinstance(parsed, dict):
            unreadable += 1
            return None
        return parsed.get("category")

    return extra.map(one).astype("string"), unreadable


ALL_REASONS = REASONS + DEDUP_REASONS


def _validate_shard(frame: pd.DataFrame, name: str, *, config: ValidationConfig, source: dict[str, str],
                    bucket_dir: str, shard_index: dict[str, int], num_buckets: int,
                    dedup: DedupSettings | None = None) -> ShardResult:
    """Pass 1 of one input shard; a memory limit hit here (the language screen, MinHash of a huge shard) is one
    line naming the file, not a bare ``MemoryError`` (issue #52)."""
    try:
        return _validate(frame, name, config=config, source=source, bucket_dir=bucket_dir, shard_index=shard_index,
                         num_buckets=num_buckets, dedup=dedup)
    except Exception as err:  # noqa: BLE001 - only a memory failure is turned into a message; others re-raised
        if isinstance(err, UserError) or not out_of_memory(err):
            raise
        offset = int(frame.attrs.get(ROW_OFFSET, 0))
        where = source[name] + (f" (rows from {offset}, counted from 0)" if offset else "")
        raise CorpusMemoryError(memory_message(where, err)) from err


def _validate(frame: pd.DataFrame, name: str, *, config: ValidationConfig, source: dict[str, str],
              bucket_dir: str, shard_index: dict[str, int], num_buckets: int,
              dedup: DedupSettings | None = None) -> ShardResult:
    # a piece of a large file (issue #52) starts at a row of its file: rejected rows name file rows
    offset = int(frame.attrs.get(ROW_OFFSET, 0))
    kept, rejected, report = validate_documents(frame, config, source_name=source[name], check_duplicates=False,
                                                row_numbers=True, row_offset=offset)
    stats, extra = report.as_metrics(), {}
    if dedup is not None:
        kept, rejected, stats, extra["signatures"] = dedup_pass1(
            kept, rejected, stats, settings=dedup, shard=name, shard_index=shard_index[name],
            source_file=source[name], work=Path(bucket_dir).parent, num_buckets=num_buckets)
    partition_ids(kept["id"], shard=name, shard_index=shard_index[name], bucket_dir=bucket_dir,
                  num_buckets=num_buckets)
    # input row and (JSON Lines) line of each kept row: to order, and to place, duplicate rejections later
    rows = kept.pop("_row").to_numpy(dtype=np.int64)
    lines = kept.pop(LINE).fillna(-1).to_numpy(dtype=np.int64) if LINE in kept.columns else np.full(len(rows), -1)
    rows = np.stack([rows, lines], axis=1)
    if "extra" in kept.columns:
        kept["category"], unreadable = category_counted(kept["extra"])
        if unreadable:  # only when there are some: the manifest of a clean corpus stays as it was
            stats["extra_unreadable"] = unreadable
    # ``validated`` is already in the final documents format: a shard without duplicates or cap
    # is adopted as it is (a hard link), not read and written again.
    return ShardResult({"validated": kept, "kept_rows": rows, "rejected": rejected, **extra}, stats)


def _load_validated(work: str, name: str) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    return (pd.read_parquet(Path(work) / "validated" / "shards" / f"{name}.parquet"),
            np.load(Path(work) / "kept_rows" / "shards" / f"{name}.npy"),
            pd.read_parquet(Path(work) / "rejected_pass1" / "shards" / f"{name}.parquet"))


def _final_stats(stats: dict, dropped: dict[str, int], kept: int, limit: int | None) -> tuple[dict, int]:
    """Pass-1 counts plus the rows dropped after it (per reason) and the cap; returns (stats, rows to keep)."""
    stats = dict(stats)
    duplicates = sum(dropped.values())
    for reason, n in dropped.items():
        stats[f"dropped_{reason}"] = stats.get(f"dropped_{reason}", 0) + n
    stats["rows_dropped"] = stats.get("rows_dropped", 0) + duplicates
    stats["rows_kept"] = stats["rows_kept"] - duplicates
    keep = kept - duplicates
    if limit is not None and keep > limit:
        # Rows past the cap are not read, not dropped: report them as unread (as the whole-frame loop).
        surplus = keep - limit
        stats["rows_kept"] -= surplus
        stats["rows_read"] -= surplus
        keep = limit
    return stats, keep


def _as_frame(drops: np.ndarray | pd.DataFrame | None) -> pd.DataFrame:
    """Rows to drop as a frame ``row, reason, duplicate_of`` (an array of rows: duplicate ids)."""
    if isinstance(drops, pd.DataFrame):
        return drops
    rows = np.empty(0, dtype=np.int64) if drops is None else np.asarray(drops, dtype=np.int64)
    return pd.DataFrame({"row": rows, "reason": "duplicate_id", "duplicate_of": None})


def _one_schema(work: Path, names: Sequence[str]) -> tuple[dict[str, Any], set[str]]:
    """The columns of every validated shard (name -> arrow type, first seen wins) and the shards that lack
    one. A folder of parquet files with a ``source`` column and JSON Lines without one made shards of two
    schemas: reading the documents as one dataset then failed (``No match for FieldRef.Name(source)``)."""
    import pyarrow.parquet as pq

    validated = ShardWriter(work / "validated")
    schemas = {n: pq.read_schema(validated.shard_path(n)) for n in names}
    columns: dict[str, Any] = {}
    for schema in schemas.values():
        for field_ in schema:
            if not field_.name.startswith("__"):
                columns.setdefault(field_.name, field_.type)
    lacking = {n for n, schema in schemas.items() if set(columns) - set(schema.names)}
    return columns, lacking


def _finish_shard(loaded: tuple[pd.DataFrame, np.ndarray, pd.DataFrame], name: str, *,
                  drops: dict[str, np.ndarray | pd.DataFrame], limits: dict[str, int], source: dict[str, str],
                  pass1: dict[str, dict], columns: dict[str, Any] | None = None) -> ShardResult:
    kept, rows, rejected = loaded
    # (row, line) pairs; a 1-d array is a work folder from before lines were kept
    lines = rows[:, 1] if rows.ndim == 2 else np.full(len(rows), -1)
    rows = rows[:, 0] if rows.ndim == 2 else rows
    drop = _as_frame(drops.get(name)).sort_values("row", kind="stable")
    at = drop["row"].to_numpy(np.int64)
    is_dup = np.zeros(len(kept), dtype=bool)
    is_dup[at] = True
    n_dup = len(at)
    dup_rejected = pd.DataFrame({
        "id": pd.Series(kept["id"].to_numpy()[at], dtype="string"),
        "reason": pd.Series(drop["reason"].to_numpy(dtype=object), dtype="string"),
        "source_file": pd.Series([source[name]] * n_dup, dtype="string"),
        "row": pd.Series(rows[at], dtype="int64"),
        "line": pd.Series(lines[at], dtype="Int64").mask(lambda v: v < 0),
        "_row": rows[at],
    })
    if "duplicate_of" in rejected.columns:  # the dedup stages ran: their columns
        dup_rejected["duplicate_of"] = pd.Series(drop["duplicate_of"].to_numpy(dtype=object), dtype="string")
        dup_rejected["task"] = pd.Series([None] * n_dup, dtype="string")
    rejected = pd.concat([rejected, dup_rejected], ignore_index=True).sort_values("_row", kind="stable")
    stats, keep = _final_stats(pass1[name], drop["reason"].value_counts().to_dict(), len(kept), limits.get(name))
    documents = kept[~is_dup].iloc[:keep].reset_index(drop=True)
    for column, arrow_type in (columns or {}).items():  # one schema for every shard: absent is null
        if column not in documents.columns:
            documents[column] = pd.Series([None] * len(documents), dtype=pd.ArrowDtype(arrow_type))
    return ShardResult({"documents": documents, "rejected": rejected.drop(columns="_row").reset_index(drop=True)},
                       stats)


def _adopt_shard(work: Path, name: str, stats: dict, limit: int | None) -> None:
    """Finish a shard with no duplicate and no cap in the driver: hard-link its validated file
    as the documents shard (same bytes, same digest), rewrite its (small) rejections."""
    documents, rejected = ShardWriter(work / "documents"), ShardWriter(work / "rejected")
    validated = ShardWriter(work / "validated")
    if documents.is_complete(name) and rejected.is_complete(name):
        return
    stats, _ = _final_stats(stats, {}, int(stats["rows_kept"]), limit)
    target = documents.shard_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.link")
    if tmp.exists():
        tmp.unlink()
    try:
        os.link(validated.shard_path(name), tmp)
    except OSError:  # another file system: copy
        shutil.copyfile(validated.shard_path(name), tmp)
    os.replace(tmp, target)
    rej = pd.read_parquet(ShardWriter(work / "rejected_pass1").shard_path(name)).drop(columns="_row")
    rej_info = rejected.write(name, rej)
    documents.write_stats(name, stats)
    documents.mark_complete(validated.completed(name))
    rejected.mark_complete(rej_info)


def ingest_shards(
    tasks: Sequence[ShardTask],
    config: ValidationConfig,
    *,
    work_dir: str | Path,
    max_docs: int | None = None,
    engine: EngineConfig | None = None,
    num_buckets: int = 16,
    inputs: dict[str, str] | None = None,
    dedup: DedupSettings | None = None,
) -> IngestResult:
    """Validate ``tasks`` (one per input shard, in stream order; ``task.name`` is the source file
    named in ``rejected.source_file``) into ``<work_dir>/documents`` and ``<work_dir>/rejected``.

    ``dedup``: also decontaminate and drop exact and near-duplicate texts (:mod:`curation.data.textdedup`);
    None = validation and duplicate ids only. Re-running with the same ``work_dir`` skips every finished
    shard of every step.
    """
    work = Path(work_dir)
    engine = engine or EngineConfig()
    out_names = shard_names(len(tasks))
    source = {out: source_file(t.name) for out, t in zip(out_names, tasks)}  # a piece names its file
    renamed = [ShardTask(out, t.load) for out, t in zip(out_names, tasks)]
    index = {n: i for i, n in enumerate(out_names)}
    validate = partial(_validate_shard, config=config, source=source, bucket_dir=str(work / "buckets"),
                       shard_index=index, num_buckets=num_buckets, dedup=dedup)
    pass1_outputs = {"validated": (work / "validated", "frame"), "kept_rows": (work / "kept_rows", "array"),
                     "rejected": (work / "rejected_pass1", "frame")}
    if dedup is not None:
        pass1_outputs["signatures"] = (work / "signatures", "array")
    lsh_counts: dict[str, int] = {}

    def find_drops(upto: int) -> dict:
        drops = find_duplicates(work / "buckets", out_names[:upto], num_buckets)
        if dedup is None:
            return drops
        drops, counts = find_text_drops(work, out_names[:upto], num_buckets, dedup, drops)
        lsh_counts.clear()
        lsh_counts.update(counts)
        return drops

    def pass1(upto: int) -> list[dict]:
        return run_shards(validate, renamed[:upto], pass1_outputs, engine, desc="ingest validate")

    def kept_after_dedup(stats: list[dict], drops: dict[int, np.ndarray]) -> list[int]:
        return [int(s["rows_kept"]) - len(drops.get(i, ())) for i, s in enumerate(stats)]

    if max_docs is None:
        read = len(renamed)
        stats = pass1(read)
        drops = find_drops(read)
    else:
        # Read shards in order until max_docs documents survive dedup. Pre-dedup counts bound the
        # post-dedup ones from above, so the (all-bucket) dedup pass runs only once they reach the cap.
        read, stats, drops = 0, [], {}
        # a round validates as many shards as run at once (local workers; Ray: two, to keep both CPUs
        # busy), then stops where reading one shard a round would have: at the first prefix of shards
        # that holds max_docs after dedup. Shards validated past it are left out, so the documents and
        # counts (the LSH pair counts too; a near-duplicate chain through a later shard would drop more)
        # do not depend on the batch.
        batch = max(1, engine.workers) if engine.engine == "local" else 2
        while read < len(renamed):
            start, read = read, min(len(renamed), read + batch)
            stats = pass1(read)
            stop = None
            for upto in range(start + 1, read + 1):
                if sum(int(s["rows_kept"]) for s in stats[:upto]) < max_docs:
                    continue
                drops = find_drops(upto)
                if sum(kept_after_dedup(stats[:upto], drops)) >= max_docs:
                    stop = upto
                    break
            if stop is not None:
                read, stats = stop, stats[:stop]
                break
        else:
            drops = find_drops(read)
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
    columns, lacking = _one_schema(work, out_names[:used])
    finish = partial(_finish_shard, drops=named_drops, limits=limits, source=source, pass1=pass1_stats,
                     columns=columns)
    needs_rewrite = [n for n in out_names[:used]
                     if n in named_drops or (n in limits and limits[n] < kept_counts[index[n]]) or n in lacking]
    for n in out_names[:used]:
        if n not in needs_rewrite:
            _adopt_shard(work, n, pass1_stats[n], limits.get(n))
    final_tasks = [ShardTask(n, partial(_load_validated, str(work), n)) for n in needs_rewrite]
    outputs = {"documents": (work / "documents", "frame"), "rejected": (work / "rejected", "frame")}
    run_shards(finish, final_tasks, outputs, engine, desc="ingest finish")
    per_shard = [ShardWriter(work / "documents").stats(n) for n in out_names[:used]]
    digest = config_key(config.__dict__, max_docs, num_buckets, *([dedup.digest()] if dedup else []))
    documents = ShardWriter(work / "documents").finalize(
        out_names[:used], stage="ingest", inputs=inputs, config_digest=digest, remake=INGEST_REMAKE)
    rejected = ShardWriter(work / "rejected").finalize(
        out_names[:used], stage="ingest", inputs=inputs, config_digest=digest, remake=INGEST_REMAKE,
        aligned_with=None)
    total = sum_stats(per_shard)
    metrics = {"rows_read": int(total.get("rows_read", 0)), "rows_kept": int(total.get("rows_kept", 0))}
    reasons = ALL_REASONS if dedup is not None else REASONS
    metrics.update({f"dropped_{r}": int(total.get(f"dropped_{r}", 0)) for r in reasons})
    metrics["rows_dropped"] = sum(metrics[f"dropped_{r}"] for r in reasons)
    metrics["outside_language"] = int(total.get("outside_language", 0))
    if total.get("extra_unreadable"):  # category=None for values of extra that are not a JSON object: counted
        metrics["extra_unreadable"] = int(total["extra_unreadable"])
    if dedup is not None:
        metrics.update({k: int(v) for k, v in total.items() if k.startswith(("contaminated_", "flagged_", "minhash_"))})
        metrics.update(lsh_counts)
    metrics.update({"shards_read": used, "shards_total": len(tasks)})
    # a file larger than data.piece_mb is read as several shards (pieces): the summary counts files, which is what
    # a user has in data.path (issue #52: "7 of 7 shards" for 4 files)
    metrics.update({"files_read": len(dict.fromkeys(source_file(t.name) for t in tasks[:used])),
                    "files_total": len(dict.fromkeys(source_file(t.name) for t in tasks))})
    _check_counts(documents, metrics)
    return IngestResult(ShardedDataset(work / "documents"), ShardedDataset(work / "rejected"), metrics)


def _check_counts(documents: Manifest, metrics: dict[str, float]) -> None:
    if documents.rows != metrics["rows_kept"] or metrics["rows_read"] != metrics["rows_kept"] + metrics["rows_dropped"]:
        raise RuntimeError(f"ingest counts do not add up: {documents.rows} documents written, metrics {metrics}")


def raw_fingerprint(path: str, shard_ids: list[str]) -> str:
    """Fingerprint of the raw input: shard names, plus size and mtime of local files (hashing
    terabytes of text to name the input would cost a full read)."""
    parts: list[Any] = [path]
    for shard in shard_ids:
        name = source_file(shard)  # the pieces of a large file: that file's size and mtime
        local = Path(name) if Path(name).is_absolute() else Path(path) / name
        try:
            st = os.stat(local if local.exists() else shard)
            parts.append((shard, st.st_size, st.st_mtime_ns))
        except OSError:
            parts.append(shard)
    return config_key(*parts)


def dedup_settings(data: dict[str, Any], *, tasks: Sequence[str] = (), index_dir: Path | str | None = None,
                   data_dir: str | None = None) -> DedupSettings | None:
    """The dedup and decontamination settings of the ``data`` group (None when all are off); builds or
    reads the evaluation tasks' n-gram index (``data.decontaminate_tasks``, else ``tasks``, else every
    task shipped offline) under ``index_dir`` when ``data.decontaminate`` is not off."""
    from curation.dedup.minhash import MinHashParams

    dd = dict(data.get("dedup") or {})
    mode = str(data.get("decontaminate") or "off")
    if not dd.get("exact", True) and not dd.get("fuzzy", True) and mode == "off":
        return None
    index_path, index_key = None, ""
    if mode != "off":
        from curation.dedup.contamination import load_or_build_index
        from curation.evaluation.tasks import TASKS

        # named tasks must exist (load_or_build_index says so); eval.tasks' unshipped ones are skipped;
        # neither given (a caller without the eval group): every task of the registry shipped offline
        wanted = list(data.get("decontaminate_tasks") or [t for t in (tasks or TASKS) if t in TASKS and TASKS[t].path])
        if index_dir is None:
            raise ValueError("data.decontaminate needs a folder for its n-gram index (index_dir)")
        index = load_or_build_index(wanted, n=int(data.get("decontaminate_ngram") or 13),
                                    min_words=int(data.get("decontaminate_min_words") or 8),
                                    cache_dir=index_dir, data_dir=data_dir)
        index_path, index_key = str(Path(index_dir) / f"ngrams-{index.key}.npz"), index.key
    params = MinHashParams(ngram=int(dd.get("ngram", 5)), bands=int(dd.get("bands", 14)), rows=int(dd.get("rows", 8)),
                           seed=int(dd.get("seed", 1)))
    return DedupSettings(exact=bool(dd.get("exact", True)), fuzzy=bool(dd.get("fuzzy", True)), minhash=params,
                         threshold=float(dd.get("threshold", 0.8)), verify=bool(dd.get("verify", True)),
                         decontaminate=mode, index_path=index_path, index_key=index_key)


def ingest_corpus(raw_documents: dict[str, Any], data: dict[str, Any], *, work_root: Path | str,
                  namespace: str = "default", dedup: DedupSettings | None = None) -> IngestResult:
    """Ingest a corpus given as ``{shard_id: loader}`` with the ``data`` group's settings: validate
    every shard (locally or as Ray tasks with ``data.engine=ray``), drop duplicate ids across shards,
    then (``dedup``, from :func:`dedup_settings`) contaminated documents, exact and near duplicates,
    stop at ``data.max_docs`` kept documents. The work folder ``<work_root>/<namespace>/ingest-<key>``
    (key = settings + raw fingerprint) makes a killed run resume; its scratch parts are removed after.
    """
    config = ValidationConfig(
        id_column=data["id_column"], text_column=data["text_column"], max_chars=data.get("max_chars"),
        keep_columns=tuple(data.get("keep_columns") or ()), language=str(data.get("language") or "keep"),
    )
    engine = engine_from_data(data)
    if engine.engine == "local" and str(data.get("path", "")).startswith("memory://"):
        # fsspec's memory:// file system lives in this process: a worker process would find it empty
        engine = replace(engine, workers=1)
    buckets = int(data.get("dedup_buckets") or 16)
    raw_fp = raw_fingerprint(str(data.get("path", "")), list(raw_documents))
    key = config_key({k: v for k, v in data.items() if k not in ENGINE_KEYS}, raw_fp,
                     *([dedup.digest()] if dedup else []))
    work = Path(work_root) / namespace / f"ingest-{key}"
    tasks = [ShardTask(shard_id, load) for shard_id, load in raw_documents.items()]
    inputs = {"raw_documents": raw_fp}
    if dedup is not None and dedup.index_key:
        inputs["decontamination_index"] = dedup.index_key
    result = ingest_shards(tasks, config, work_dir=work, max_docs=data.get("max_docs"), engine=engine,
                           num_buckets=buckets, inputs=inputs, dedup=dedup)
    for scratch in ("validated", "kept_rows", "rejected_pass1", "buckets", "signatures", "exact_buckets",
                    "fuzzy_buckets"):
        shutil.rmtree(work / scratch, ignore_errors=True)
    log.info("ingest: %s", result.metrics)
    if result.metrics.get("extra_unreadable"):
        log.warning("ingest: %d value(s) of the extra column are not a JSON object (invalid JSON, or a list or a "
                    "number): their category is null (metric extra_unreadable)", result.metrics["extra_unreadable"])
    if result.metrics["rows_kept"] == 0:
        raise empty_corpus_error(result.metrics, data, work / "rejected")
    return result


# What to check when every row of a corpus was dropped for one reason.
_FIX = {
    "missing_id": "data.id_column names the id column",
    "empty_text": "data.text_column names the text column",
    "not_text": "data.text_column names a column of strings (not JSON objects, arrays or numbers)",
    "too_long": "data.max_chars (default 1,000,000 characters) fits the documents",
    "outside_language": "the corpus is in English, the raters' language (data.language=keep keeps the others)",
    "invalid_json": "the files are JSON Lines (one JSON object per line; data.format forces a format)",
    "invalid_utf8": "the text is UTF-8",
    "duplicate_id": "the ids are unique",
    "exact_duplicate": "the texts are not all copies of one (data.dedup.exact=false keeps copies)",
    "near_duplicate": "the texts are not all near-copies of one (data.dedup.fuzzy=false keeps them)",
    "contaminated": "the corpus is not the evaluation data itself (data.decontaminate=flag keeps it)",
}


def empty_corpus_error(metrics: dict[str, float], data: dict[str, Any], rejected: Path) -> EmptyCorpusError:
    """Every row dropped, or none read: stop here, with the counts by cause, instead of failing later in
    scoring with a message about classes."""
    path = data.get("path", "?")
    shards = f"{_num(metrics.get('shards_read', 0))} shard(s)"
    if not metrics.get("rows_read"):
        return EmptyCorpusError(f"data.path={path}: no document to select from: the {shards} read hold 0 rows. "
                                f"Fix: point data.path at files with rows (parquet or JSON Lines).")
    causes = sorted(((k.removeprefix("dropped_"), int(v)) for k, v in metrics.items()
                     if k.startswith("dropped_") and v), key=lambda kv: -kv[1])
    counts = ", ".join(f"{reason} {n:,}" for reason, n in causes)
    fix = "; ".join(_FIX[reason] for reason, _ in causes if reason in _FIX)
    return EmptyCorpusError(
        f"data.path={path}: no document survived ingestion: {int(metrics['rows_read']):,} rows read from {shards}, "
        f"all dropped ({counts}). Fix: check that {fix}. Each dropped row, with its file, row and line, is in "
        f"{rejected / 'shards'}.")


def _num(value: float) -> str:
    return f"{int(value):,}"


