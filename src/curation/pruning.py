"""Quality-aware pruning (DATAMASK Sec. 4.3 and Appendix A.5).

"We perform quality-aware pruning by filtering out samples with a quality
score lower than 4" (A.5); Sec. 4.3 phrases the same step as filtering "the
bottom 40-50% of samples based on quality scores" (Table 1 uses 45%). Both
rules are here; ``mode`` chooses. Documents whose score is NaN are never kept
silently nor dropped silently: they are dropped and counted as
``dropped_nan_quality`` (or raise, with ``nan_policy="error"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from curation.configuration import check, in_range, one_of


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
        raise KeyError(f"pruning needs the column {config.score_column!r}; scores have {list(scores.columns)}")
    quality = scores[config.score_column].to_numpy(dtype="float64", na_value=np.nan)
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
        "quality_mean_before": float(np.nanmean(quality)) if finite.any() else float("nan"),
        "quality_mean_after": float(quality[keep].mean()) if keep.any() else float("nan"),
    }
    return keep, report


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
