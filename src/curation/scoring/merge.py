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

import json
from dataclasses import dataclass, field
from pathlib import Path

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


def _mid_rank_cdf(sorted_sample: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``p = (#sample < x + #sample == x / 2) / n`` for every ``x`` (finite ``x`` only).

    For ``x`` in the sample this is the mid-rank ``(rank_average - 0.5) / n`` (ties share a
    rank), computed exactly: ``k + t/2`` and ``rank - 0.5`` are the same half-integer. For a
    new ``x`` it is the sample's empirical CDF at ``x``; it stays in [0, 1]."""
    below = np.searchsorted(sorted_sample, x, side="left")
    upto = np.searchsorted(sorted_sample, x, side="right")
    return (below + (upto - below) / 2) / sorted_sample.size


def quantile_map(x: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Map ``x`` onto the distribution of ``reference``: ``Q_ref(F_x(x))``.

    ``F_x`` is the mid-rank empirical CDF (ties share a rank, so equal inputs
    map to equal outputs); ``Q_ref`` is ``np.quantile`` with linear
    interpolation, so outputs lie in [min(reference), max(reference)]. NaN in
    ``x`` stays NaN; NaN in ``reference`` is ignored. The same map as
    :class:`MergeMap` fitted and applied on one frame.
    """
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    ref = ref[np.isfinite(ref)]
    if ref.size == 0:
        raise ValueError("quantile_map: the reference has no finite value")
    out = np.full(x.shape, np.nan)
    ok = np.isfinite(x)
    if ok.any():
        out[ok] = np.quantile(ref, _mid_rank_cdf(np.sort(x[ok]), x[ok]))
    return out


@dataclass
class MergeMap:
    """The 0-15 merge fitted on a sample and applied to any rows (DATAMASK App. A.5 on shards).

    ``samples[c]``: the sample's sorted finite values of component ``c``; ``reference``: the
    sample's sorted finite reference values (clipped to the scale). A new value ``x`` maps to
    ``Q_ref(p)`` with ``p = (#sample < x + #sample == x / 2) / n``, which is the mid-rank map of
    :func:`quantile_map` for points in the sample: fitted on the whole corpus, the sharded
    scores equal the one-frame ones. Memory: 8 bytes per sample row and component.
    """

    cfg: MergeConfig
    samples: dict[str, np.ndarray]
    reference: np.ndarray

    @classmethod
    def fit(cls, scores: pd.DataFrame, cfg: MergeConfig | None = None) -> "MergeMap":
        """Fit on the sample's score columns ``cfg.components`` and ``cfg.reference``."""
        cfg = cfg or MergeConfig()
        if cfg.nan_policy not in ("floor", "nan"):
            raise ValueError(f"nan_policy must be floor or nan, got {cfg.nan_policy!r}")
        missing = [c for c in [*cfg.components, cfg.reference] if c not in scores.columns]
        if missing:
            raise KeyError(f"merge_quality: missing score columns {missing}")
        ref = np.clip(scores[cfg.reference].to_numpy(dtype=np.float64), cfg.scale_min, cfg.scale_max)
        ref = np.sort(ref[np.isfinite(ref)])
        samples = {}
        for col in cfg.components:
            if col == cfg.reference:
                continue
            if ref.size == 0:
                raise ValueError("quantile_map: the reference has no finite value")
            x = scores[col].to_numpy(dtype=np.float64)
            samples[col] = np.sort(x[np.isfinite(x)])
        return cls(cfg, samples, ref)

    def map(self, col: str, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = np.full(x.shape, np.nan)
        ok = np.isfinite(x)
        sample = self.samples[col]
        if ok.any() and sample.size:
            out[ok] = np.quantile(self.reference, _mid_rank_cdf(sample, x[ok]))
        return out

    def apply(self, scores: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
        """Add ``<component>_0_5`` columns and ``quality`` (sum, in [0, 15] for 3 raters) to a copy
        of ``scores``; counts ``nan_<component>`` / ``nan_quality``."""
        cfg = self.cfg
        out = scores.copy()
        ref = np.clip(out[cfg.reference].to_numpy(dtype=np.float64), cfg.scale_min, cfg.scale_max)
        counts: dict[str, int] = {}
        total = np.zeros(len(out))
        for col in cfg.components:
            mapped = ref.copy() if col == cfg.reference else self.map(col, out[col].to_numpy(dtype=np.float64))
            nan = ~np.isfinite(mapped)
            counts[f"nan_{col}"] = int(nan.sum())
            if cfg.nan_policy == "floor":
                mapped = np.where(nan, cfg.scale_min, mapped)
            out[f"{col}_0_5"] = mapped
            total = total + mapped  # NaN propagates under nan_policy="nan"
        out[cfg.output_column] = total
        counts[f"nan_{cfg.output_column}"] = int((~np.isfinite(total)).sum())
        return out, counts

    def save(self, path: str | Path) -> None:
        """``.npz``: the sorted sample values per component, the reference and the config."""
        from dataclasses import asdict

        arrays = {f"component__{c}": v for c, v in self.samples.items()}
        np.savez(path, reference=self.reference, config=json.dumps(asdict(self.cfg)), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> "MergeMap":
        with np.load(path) as f:
            cfg = MergeConfig(**json.loads(str(f["config"])))
            samples = {k[len("component__"):]: f[k].copy() for k in f.files if k.startswith("component__")}
            return cls(cfg, samples, f["reference"].copy())


def merge_quality(scores: pd.DataFrame, cfg: MergeConfig | None = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """Add ``<component>_0_5`` columns and ``quality`` (sum, in [0, 15] for 3 raters), the map
    fitted on ``scores`` itself (:class:`MergeMap`).

    Reads the ``cfg.components`` columns of ``scores``; returns a copy with the
    new columns and counts ``nan_<component>`` / ``nan_quality``.
    """
    return MergeMap.fit(scores, cfg).apply(scores)


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
