"""Quality-aware pruning (DATAMASK Sec. 4.3 and Appendix A.5).

"We perform quality-aware pruning by filtering out samples with a quality
score lower than 4" (A.5); Sec. 4.3 phrases the same step as filtering "the
bottom 40-50% of samples based on quality scores" (Table 1 uses 45%). Both
rules are here; ``mode`` chooses. Documents whose score is NaN are never kept
silently nor dropped silently: they are dropped and counted as
``dropped_nan_quality`` (or raise, with ``nan_policy="error"``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from curation.cache import atomic_write_text
from curation.configuration import ConfigError, check, in_range, one_of
from curation.errors import UserError
from curation.shards.store import ShardWriter


@dataclass
class PruningConfig:
    mode: str = "threshold"  # threshold: drop quality < threshold; bottom_pct: drop the lowest bottom_pct %
    threshold: float = 4.0  # on the 0-15 merged quality scale (A.5)
    bottom_pct: float = 45.0  # percent of documents dropped in bottom_pct mode (Sec. 4.3: 40-50)
    score_column: str = "quality"
    nan_policy: str = "drop"  # drop (counted) | error

    def __post_init__(self) -> None:
        one_of("mode", self.mode, ("threshold", "bottom_pct"))
        check(math.isfinite(self.threshold), "threshold", self.threshold, "a finite number")
        in_range("bottom_pct", self.bottom_pct, 0, 100, high_open=True)
        one_of("nan_policy", self.nan_policy, ("drop", "error"))


def prune(scores: pd.DataFrame, config: PruningConfig) -> tuple[np.ndarray, dict[str, float]]:
    """Return ``(keep, report)``: a boolean mask over ``scores`` rows and the counts.

    In ``bottom_pct`` mode exactly ``floor(N * pct / 100)`` of the scored
    documents are dropped; ties at the cut are broken by row order (stable),
    so the result does not depend on the sort algorithm.
    """
    if config.score_column not in scores.columns:
        raise missing_score_column(config.score_column, scores.columns)
    quality = numeric_scores(config.score_column, scores[config.score_column])
    finite = np.isfinite(quality)
    n_nan = int((~finite).sum())
    if n_nan and config.nan_policy == "error":
        raise ValueError(f"{n_nan} documents have no finite {config.score_column!r} score")
    keep = finite.copy()
    if config.mode == "threshold":
        keep &= quality >= config.threshold
        cut = float(config.threshold)
    else:
        idx = np.flatnonzero(finite)
        n_drop = int(np.floor(len(idx) * config.bottom_pct / 100.0))
        order = idx[np.argsort(quality[idx], kind="stable")]
        keep[order[:n_drop]] = False
        cut = float(quality[order[n_drop]]) if n_drop < len(order) else float("nan")
    report = {
        "docs_in": float(len(scores)),
        "kept": float(keep.sum()),
        "dropped_low_quality": float(finite.sum() - keep.sum()),
        "dropped_nan_quality": float(n_nan),
        "kept_share": float(keep.mean()) if len(keep) else 0.0,
        "cut_quality": cut,
        "quality_mean_before": float(quality[finite].mean()) if finite.any() else float("nan"),  # finite: not +-inf
        "quality_mean_after": float(quality[keep].mean()) if keep.any() else float("nan"),
    }
    return keep, report


class PruningEmptyError(UserError, ValueError):
    """Pruning kept no document: the selection after it would have nothing to choose from."""


def empty_pruning_error(report: dict[str, float], config: PruningConfig, quality: np.ndarray) -> PruningEmptyError:
    """The one-line error for a pruning that removed every document (``report["kept"] == 0``), with the rule
    that did it, the scores the corpus has and the fix; ``quality`` is the score column before pruning."""
    docs = int(report.get("docs_in", len(quality)))
    finite = quality[np.isfinite(quality)]
    rule = (f"pruning.threshold={config.threshold:g}" if config.mode == "threshold"
            else f"pruning.mode=bottom_pct, pruning.bottom_pct={config.bottom_pct:g}")
    if not len(finite):
        return PruningEmptyError(
            f"pruning removed every document ({rule}): none of the {docs:,} documents has a finite "
            f"{config.score_column!r} score (dropped_nan_quality {docs:,}). Fix: check the scoring stage's "
            f"output (`curate pipeline=scoring` re-makes it) and pruning.score_column.")
    highest = float(finite.max())
    fix = (f"lower pruning.threshold to at most {highest:.3g} (default 4 on the 0-15 scale), or set "
           f"pruning.mode=bottom_pct to drop a share instead" if config.mode == "threshold"
           else "lower pruning.bottom_pct")
    return PruningEmptyError(
        f"pruning removed every document ({rule}): 0 of {docs:,} kept; the highest {config.score_column} is "
        f"{highest:.3g}, the mean {float(finite.mean()):.3g}. Fix: {fix}.")


def _refuse_empty(report: dict[str, float], config: PruningConfig, scores: Any) -> None:
    if report["kept"] == 0 and report["docs_in"] > 0:
        raise empty_pruning_error(report, config, quality_column(scores, config.score_column))


def quality_histogram(quality: np.ndarray, keep: np.ndarray | None = None, max_score: int = 15) -> pd.DataFrame:
    """Documents per integer score (floor) before and after pruning: the DATAMASK Table 6 layout."""
    quality = np.asarray(quality, dtype="float64")
    finite = np.isfinite(quality)
    bins = np.clip(np.floor(quality[finite]), 0, max_score).astype(int)
    before = np.bincount(bins, minlength=max_score + 1)
    table = pd.DataFrame({"score": np.arange(max_score + 1), "docs_before": before,
                          "share_before": before / max(before.sum(), 1)})
    if keep is not None:
        after = np.bincount(np.clip(np.floor(quality[finite & keep]), 0, max_score).astype(int),
                            minlength=max_score + 1)
        table["docs_after"] = after
        table["share_after"] = after / max(after.sum(), 1)
    return table


def histogram_from_counts(before: np.ndarray, after: np.ndarray | None = None, max_score: int = 15) -> pd.DataFrame:
    """:func:`quality_histogram`'s table from per-score counts (summed over shards)."""
    before = np.asarray(before, dtype=np.int64)
    table = pd.DataFrame({"score": np.arange(max_score + 1), "docs_before": before,
                          "share_before": before / max(before.sum(), 1)})
    if after is not None:
        after = np.asarray(after, dtype=np.int64)
        table["docs_after"] = after
        table["share_after"] = after / max(after.sum(), 1)
    return table


# --- pruning on shards (issue #14): bounded memory, resumable, local or Ray ---

PRUNING_REMAKE = "curate pipeline=pruning"
PRUNING_VERSION = "pruning-shards-v1"


@dataclass
class ShardCut:
    """The global rule, known before the per-shard pass (issue #14 item 3).

    ``threshold`` mode: keep finite ``q >= threshold``. ``bottom_pct`` mode: drop every finite
    ``q < tie_value`` and, of the rows with ``q == tie_value``, the first ``ties_to_drop[shard]``
    of each shard in row order: exactly the rows a stable sort of the concatenated column drops.
    """

    mode: str
    threshold: float = float("nan")
    tie_value: float = float("nan")
    ties_to_drop: dict[str, int] | None = None
    cut_quality: float = float("nan")  # prune()'s report value: the lowest kept score (bottom_pct)


def missing_score_column(column: str, columns: Any, key: str = "pruning.score_column") -> ConfigError:
    """The one-line refusal of a score column the scores lack, naming ``key`` and the columns they have."""
    have = [str(c) for c in columns if str(c) not in ("id", "text")]
    return ConfigError(key, f"{column!r} is not a column of the scores (they have {have}). Fix: set {key} to one of "
                            f"them (quality = the merged 0-15 score), or turn that rater on in the scoring config and "
                            f"re-run scoring", column)


def numeric_scores(column: str, values: pd.Series, key: str = "pruning.score_column") -> np.ndarray:
    """``values`` as float64, missing scores as NaN. An object column of numbers and nulls (records read
    from JSON with nulls) is numbers; one holding any string or boolean is not a score column."""
    if values.dtype == object:
        present = values.dropna()
        if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
               for v in present):
            return pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    if not (pd.api.types.is_numeric_dtype(values.dtype) and not pd.api.types.is_bool_dtype(values.dtype)):
        raise ConfigError(key, f"the scores' column {column!r} holds {values.dtype} values, not numbers. Fix: set {key} "
                               f"to a numeric score column (quality = the merged 0-15 score)", column)
    return values.to_numpy(dtype="float64", na_value=np.nan)


def quality_column(scores: Any, column: str = "quality", key: str = "pruning.score_column") -> np.ndarray:
    """The ``column`` of every shard of ``scores`` (a :class:`curation.shards.ShardedDataset`), concatenated
    in shard-then-row order as float64: 8 bytes per document, the one global array pruning and
    streaming selection hold (no ids, no text, no embeddings)."""
    parts = []
    for name in scores.names:
        frame = scores.read(name, [column]) if column in scores.manifest.schema else None
        if frame is None:
            raise missing_score_column(column, scores.manifest.schema, key)
        parts.append(numeric_scores(column, frame[column], key))
    return np.concatenate(parts) if parts else np.empty(0, dtype="float64")


def plan_cut(scores: Any, config: PruningConfig) -> ShardCut:
    """The cut of ``config`` over a sharded ``scores``. ``threshold`` needs no pass; ``bottom_pct``
    reads the quality column once (8 bytes/doc, :func:`quality_column`), finds the score of the
    last dropped row by selection (``np.partition``, O(N)) and splits the tied rows at it among the
    shards in shard-then-row order, so the kept rows equal :func:`prune` on the concatenated frame."""
    if config.mode == "threshold":
        if config.score_column not in scores.manifest.schema:
            raise missing_score_column(config.score_column, scores.manifest.schema)
        return ShardCut("threshold", threshold=float(config.threshold), cut_quality=float(config.threshold))
    quality = quality_column(scores, config.score_column)
    finite = np.isfinite(quality)
    n_nan = int((~finite).sum())
    if n_nan and config.nan_policy == "error":
        raise ValueError(f"{n_nan} documents have no finite {config.score_column!r} score")
    values = quality[finite]
    n_drop = int(np.floor(len(values) * config.bottom_pct / 100.0))
    if n_drop == 0:
        cut = float(np.min(values)) if len(values) else float("nan")
        return ShardCut("bottom_pct", tie_value=float("-inf"), ties_to_drop={}, cut_quality=cut)
    kth = [n_drop - 1, n_drop] if n_drop < len(values) else [n_drop - 1]
    part = np.partition(values, kth)
    tie_value = float(part[n_drop - 1])
    cut = float(part[n_drop]) if n_drop < len(values) else float("nan")
    remaining = n_drop - int((values < tie_value).sum())  # tied rows to drop, earliest first
    ties: dict[str, int] = {}
    offset = 0
    for info in scores.manifest.shards:
        in_shard = int((quality[offset:offset + info.rows] == tie_value).sum())
        ties[info.name] = min(remaining, in_shard)
        remaining -= ties[info.name]
        offset += info.rows
    return ShardCut("bottom_pct", tie_value=tie_value, ties_to_drop=ties, cut_quality=cut)


def keep_mask(quality: np.ndarray, cut: ShardCut, name: str, config: PruningConfig) -> np.ndarray:
    """The rows of one shard that ``cut`` keeps (NaN: dropped, or an error with ``nan_policy=error``)."""
    finite = np.isfinite(quality)
    if config.nan_policy == "error" and not finite.all():
        raise ValueError(f"shard {name}: {int((~finite).sum())} documents have no finite "
                         f"{config.score_column!r} score (pruning.nan_policy=error)")
    if cut.mode == "threshold":
        return finite & (quality >= cut.threshold)
    keep = finite & (quality > cut.tie_value)
    tied = np.flatnonzero(finite & (quality == cut.tie_value))
    keep[tied[(cut.ties_to_drop or {}).get(name, 0):]] = True
    return keep


def _load_scores_and_embeddings(scores_root: str, embeddings_root: str | None, name: str):
    from curation.shards.store import ShardedDataset

    frame = ShardedDataset(scores_root).read(name)
    embeddings = ShardedDataset(embeddings_root).array(name, mmap=True) if embeddings_root else None
    return frame, embeddings


def prune_shard(loaded, name: str, *, config: PruningConfig, cut: ShardCut, max_score: int = 15):
    """One shard: its kept score rows and the aligned embedding rows, and the counts that add up
    across shards (documents, drops per reason, quality sums, histogram bins before/after)."""
    from curation.shards.executor import ShardResult

    frame, embeddings = loaded
    if embeddings is not None and len(embeddings) != len(frame):
        raise ValueError(f"shard {name}: scores have {len(frame)} rows but embeddings {len(embeddings)}")
    quality = frame[config.score_column].to_numpy(dtype="float64", na_value=np.nan)
    keep = keep_mask(quality, cut, name, config)
    finite = np.isfinite(quality)
    before = np.bincount(np.clip(np.floor(quality[finite]), 0, max_score).astype(int), minlength=max_score + 1)
    after = np.bincount(np.clip(np.floor(quality[keep]), 0, max_score).astype(int), minlength=max_score + 1)
    stats: dict[str, float] = {
        "docs_in": len(frame), "kept": int(keep.sum()), "dropped_low_quality": int(finite.sum() - keep.sum()),
        "dropped_nan_quality": int((~finite).sum()), "quality_sum_before": float(quality[finite].sum()),
        "quality_finite": int(finite.sum()), "quality_sum_after": float(quality[keep].sum()),
    }
    stats.update({f"hist_before_{i}": int(c) for i, c in enumerate(before)})
    stats.update({f"hist_after_{i}": int(c) for i, c in enumerate(after)})
    rows = np.flatnonzero(keep)
    outputs: dict[str, Any] = {"pruned_scores": frame.iloc[rows].reset_index(drop=True)}
    if embeddings is not None:
        outputs["pruned_embeddings"] = np.ascontiguousarray(embeddings[rows], dtype=np.float32)
    return ShardResult(outputs, stats)


@dataclass
class ShardedPruning:
    """The outputs of :func:`prune_shards`."""

    scores: Any  # curation.shards.ShardedDataset: pruned_scores
    embeddings: Any  # curation.shards.ShardedDataset: pruned_embeddings
    report: dict[str, float]
    table: pd.DataFrame


def _check_pair(scores: Any, embeddings: Any) -> None:
    from curation.shards.lineage import LineageError

    ours = [(s.name, s.rows) for s in scores.manifest.shards]
    theirs = [(s.name, s.rows) for s in embeddings.manifest.shards]
    if ours != theirs:
        raise LineageError(f"pruning: scores ({scores.root}) and embeddings ({embeddings.root}) are not aligned "
                           f"shard for shard: {ours[:3]}... vs {theirs[:3]}...; re-make both with "
                           "`curate pipeline=scoring`")
    a, b = scores.manifest.aligned_with, embeddings.manifest.aligned_with
    if a and b and a != b:
        raise LineageError(f"pruning: scores were made from documents {a}, embeddings from documents {b}: one is "
                           "stale. Re-make both with `curate pipeline=scoring`")
    if embeddings.manifest.kind != "array":
        raise ValueError(f"pruning: embeddings ({embeddings.root}) must be an array dataset")


def prune_shards(scores: Any, embeddings: Any, config: PruningConfig, work: str | Path, *,
                 engine: Any = None) -> ShardedPruning:
    """:func:`prune` on sharded ``scores`` and the aligned ``embeddings`` (DATAMASK Sec. 4.3, A.5), one
    shard at a time (local, or Ray tasks with ``engine``), into ``<work>/pruned_scores`` (a frame with
    the kept rows of each scores shard, same shard names, in order) and ``<work>/pruned_embeddings``
    (aligned with it). Memory: one shard, plus the quality column (8 bytes/doc) in ``bottom_pct``
    mode. The kept rows equal :func:`prune` on the concatenated frame in both modes (ties broken by
    shard-then-row order); the counts and the histogram are sums of the per-shard counts.
    ``work`` makes a killed run resume (finished shards are skipped) and a finished one a no-op.
    A rule that keeps no document is refused (:class:`PruningEmptyError`, the same from a finished ``work``):
    the selection after it would have nothing to choose from.
    """
    from curation.cache import config_key
    from curation.shards.executor import EngineConfig, ShardTask, run_shards
    from curation.shards.store import ShardedDataset

    work = Path(work)
    done = work / "report.json"
    if done.is_file() and (work / "pruned_scores" / "manifest.json").is_file() \
            and (work / "pruned_embeddings" / "manifest.json").is_file():
        saved = json.loads(done.read_text())
        _refuse_empty(saved["report"], config, scores)
        return ShardedPruning(ShardedDataset(work / "pruned_scores", keep=True),
                              ShardedDataset(work / "pruned_embeddings", keep=True), saved["report"],
                              pd.DataFrame(saved["table"]))
    _check_pair(scores, embeddings)
    cut = plan_cut(scores, config)
    tasks = [ShardTask(name, partial(_load_scores_and_embeddings, str(scores.root), str(embeddings.root), name))
             for name in scores.names]
    outputs = {"pruned_scores": (work / "pruned_scores", "frame"),
               "pruned_embeddings": (work / "pruned_embeddings", "array")}
    per_shard = run_shards(partial(prune_shard, config=config, cut=cut), tasks, outputs,
                           engine or EngineConfig(), desc="pruning")
    total: dict[str, float] = {}
    for stats in per_shard:
        for key, value in stats.items():
            total[key] = total.get(key, 0) + value
    docs = int(total.get("docs_in", 0))
    kept = int(total.get("kept", 0))
    report = {
        "docs_in": float(docs), "kept": float(kept), "dropped_low_quality": float(total.get("dropped_low_quality", 0)),
        "dropped_nan_quality": float(total.get("dropped_nan_quality", 0)),
        "kept_share": kept / docs if docs else 0.0, "cut_quality": cut.cut_quality,
        "quality_mean_before": total["quality_sum_before"] / total["quality_finite"]
        if total.get("quality_finite") else float("nan"),
        "quality_mean_after": total["quality_sum_after"] / kept if kept else float("nan"),
    }
    before = [int(total.get(f"hist_before_{i}", 0)) for i in range(16)]
    after = [int(total.get(f"hist_after_{i}", 0)) for i in range(16)]
    table = histogram_from_counts(np.array(before), np.array(after))
    digest = config_key(PRUNING_VERSION, dataclasses.asdict(config))
    inputs = {"scores": scores.fingerprint, "embeddings": embeddings.fingerprint}
    if scores.manifest.aligned_with:  # the documents both were made from: selection checks it
        inputs["documents"] = scores.manifest.aligned_with
    names = scores.names
    pruned = ShardWriter(work / "pruned_scores", "frame").finalize(
        names, stage="pruning", inputs=inputs, config_digest=digest, remake=PRUNING_REMAKE)
    ShardWriter(work / "pruned_embeddings", "array").finalize(
        names, stage="pruning", inputs={"pruned_scores": pruned.fingerprint, **inputs}, config_digest=digest,
        remake=PRUNING_REMAKE, aligned_with=pruned.fingerprint)
    atomic_write_text(done, json.dumps({"report": report, "table": table.to_dict(orient="list")}))
    _refuse_empty(report, config, scores)
    return ShardedPruning(ShardedDataset(work / "pruned_scores", keep=True),
                          ShardedDataset(work / "pruned_embeddings", keep=True), report, table)
