"""The merged quality score on 0-15 (DATAMASK Appendix A.5) and its Table 6 analogue.

DATAMASK Appendix A.5: "We first calculate the scores for all the data, then
proportionally convert the scores of the other two metrics into a scale of
0-5 based on the distribution of the Edu score. Finally, we sum these three
scores to obtain a total score ranging from 0 to 15."

"Convert ... based on the distribution of the Edu score" is read as quantile
mapping: a DCLM score at percentile p becomes the Edu score's p-quantile,
``y = Q_edu(F_dclm(x))``. The map is monotone (order within a rater is kept),
lands in the reference's range (within [0, 5]), and gives every mapped rater
the Edu score's histogram, so no rater dominates the sum by its spread.

Which raters enter and which is the reference are config (``MergeConfig``).
A NaN component (a document a rater could not score) is counted and, by
default, contributes the bottom of the scale (0), so the document stays in the
table and sorts low; ``nan_policy="nan"`` propagates NaN instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass
class MergeConfig:
    """Which rater columns are summed into ``quality`` and how they are scaled."""

    # score columns summed into quality (DATAMASK: DCLM, Edu, Wiki)
    components: list[str] = field(default_factory=lambda: ["fasttext_dclm", "edu", "wiki"])
    # the column whose distribution the others are mapped onto (DATAMASK: Edu, 0-5)
    reference: str = "edu"
    # scale of the reference (the Edu annotation scale); the reference is clipped to it
    scale_min: float = 0.0
    scale_max: float = 5.0
    # "floor": a NaN component counts as scale_min; "nan": quality becomes NaN
    nan_policy: str = "floor"
    # name of the merged column
    output_column: str = "quality"


def quantile_map(x: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Map ``x`` onto the distribution of ``reference``: ``Q_ref(F_x(x))``.

    ``F_x`` is the mid-rank empirical CDF (ties share a rank, so equal inputs
    map to equal outputs); ``Q_ref`` is ``np.quantile`` with linear
    interpolation, so outputs lie in [min(reference), max(reference)]. NaN in
    ``x`` stays NaN; NaN in ``reference`` is ignored.
    """
    from scipy.stats import rankdata

    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    ref = ref[np.isfinite(ref)]
    if ref.size == 0:
        raise ValueError("quantile_map: the reference has no finite value")
    out = np.full(x.shape, np.nan)
    ok = np.isfinite(x)
    n = int(ok.sum())
    if n:
        p = (rankdata(x[ok], method="average") - 0.5) / n  # in (0, 1)
        out[ok] = np.quantile(ref, p)
    return out


def merge_quality(scores: pd.DataFrame, cfg: MergeConfig | None = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """Add ``<component>_0_5`` columns and ``quality`` (sum, in [0, 15] for 3 raters).

    Reads the ``cfg.components`` columns of ``scores``; returns a copy with the
    new columns and counts ``nan_<component>`` / ``nan_quality``.
    """
    cfg = cfg or MergeConfig()
    if cfg.nan_policy not in ("floor", "nan"):
        raise ValueError(f"nan_policy must be floor or nan, got {cfg.nan_policy!r}")
    missing = [c for c in [*cfg.components, cfg.reference] if c not in scores.columns]
    if missing:
        raise KeyError(f"merge_quality: missing score columns {missing}")

    out = scores.copy()
    ref = np.clip(out[cfg.reference].to_numpy(dtype=np.float64), cfg.scale_min, cfg.scale_max)
    counts: dict[str, int] = {}
    total = np.zeros(len(out))
    for col in cfg.components:
        raw = out[col].to_numpy(dtype=np.float64)
        mapped = ref.copy() if col == cfg.reference else quantile_map(raw, ref)
        nan = ~np.isfinite(mapped)
        counts[f"nan_{col}"] = int(nan.sum())
        if cfg.nan_policy == "floor":
            mapped = np.where(nan, cfg.scale_min, mapped)
        out[f"{col}_0_5"] = mapped
        total = total + mapped  # NaN propagates under nan_policy="nan"
    out[cfg.output_column] = total
    counts[f"nan_{cfg.output_column}"] = int((~np.isfinite(total)).sum())
    return out, counts


def quality_share(quality: pd.Series | np.ndarray, max_score: int = 15) -> pd.DataFrame:
    """Share of documents per integer score (DATAMASK Table 6 analogue).

    Score ``k`` holds ``k <= quality < k+1`` (``max_score`` holds exactly
    ``max_score``), so "quality below 4" (Sec. 4.3 pruning) is scores 0-3.
    Columns: ``score``, ``count``, ``share`` (of finite rows); NaN rows are
    reported in a last row with ``score = -1`` rather than dropped.
    """
    q = np.asarray(quality, dtype=np.float64)
    ok = np.isfinite(q)
    k = np.clip(np.floor(q[ok]), 0, max_score).astype(int)
    count = np.bincount(k, minlength=max_score + 1)
    frame = pd.DataFrame({"score": np.arange(max_score + 1), "count": count})
    frame["share"] = frame["count"] / max(int(ok.sum()), 1)
    n_nan = int((~ok).sum())
    if n_nan:
        frame = pd.concat([frame, pd.DataFrame({"score": [-1], "count": [n_nan], "share": [np.nan]})], ignore_index=True)
    return frame
