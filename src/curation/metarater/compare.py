"""What Meta-rater's w* is compared against (seeds/004 Sec. 5.1-5.2, Table 4, Fig. 2), and how.

Every method scores the candidates and one rule selects from the score (the pipeline's
``metarater.selection_rule``: a token budget with fixed domain proportions, or the top
``keep_frac``), so all selections have the same size and mix; each is a sorted index array:

- ``metarater``: top-k by ``w* . q`` (:func:`curation.metarater.select_top`);
- ``uniform``: the Mean baseline, top-k by the arithmetic mean of the scaled raters;
- ``intersection``: documents that meet every rater's criterion. The per-rater
  top-p sets are relaxed (p grows) until their intersection holds k documents,
  i.e. the k documents with the best *worst* per-rater rank (ties: best mean
  rank, then document order); the p reached is reported (the paper could only
  intersect 4 raters before the data ran out, Table 4 footnote);
- ``random``: candidates in a seeded random order;
- ``rater:<name>``: top-k by one rater alone.

Each selection is evaluated by training one proxy per seed; :class:`EvalStore`
caches those runs as JSON by content (selection, seed, bench), so a killed
comparison resumes and the same selection is never trained twice.

No Kedro, MLflow or Hydra imports.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from curation.metarater.core import aggregate, fit_regressor, search_weights, select_top
from curation.metarater.proxy import array_hash, fingerprint, write_json

log = logging.getLogger(__name__)


def uniform_weights(m: int) -> np.ndarray:
    """The Mean baseline's weights: 1/m each."""
    return np.full(m, 1.0 / m)


def rank_fraction(scaled: np.ndarray) -> np.ndarray:
    """Per rater, the fraction of documents scoring at least as high as each document, in (0, 1].

    A document lies in rater j's top-p set exactly when its value is <= p (ties
    share the worse rank, so a tie never slips in ahead of its equals).
    """
    scaled = np.asarray(scaled, dtype="float64")
    n = len(scaled)
    out = np.empty_like(scaled)
    for j in range(scaled.shape[1]):
        col = scaled[:, j]
        ascending = np.sort(col)
        # documents with a score >= col[i] = n - (documents with a score < col[i])
        out[:, j] = (n - np.searchsorted(ascending, col, side="left")) / n
    return out


def intersection_order(scaled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Documents best first by their worst per-rater rank (ties: best mean rank, then document order),
    and each document's worst rank fraction (the per-rater top-p it needs)."""
    ranks = rank_fraction(scaled)
    worst, mean = ranks.max(axis=1), ranks.mean(axis=1)
    return np.lexsort((np.arange(len(scaled)), mean, worst)), worst  # last key is primary


def intersection_score(scaled: np.ndarray) -> np.ndarray:
    """A score whose top-k are the k documents of the intersection of the relaxed per-rater top-p sets."""
    order, _ = intersection_order(scaled)
    score = np.empty(len(scaled))
    score[order] = -np.arange(len(scaled), dtype="float64")
    return score


def select_intersection(scaled: np.ndarray, keep_frac: float) -> tuple[np.ndarray, float]:
    """The k documents with the best worst-case per-rater rank, and the per-rater top fraction p it needed."""
    order, worst = intersection_order(scaled)
    k = max(1, int(round(len(scaled) * keep_frac)))
    chosen = order[:k]
    return np.sort(chosen), float(worst[chosen].max())


def select_random(n: int, keep_frac: float, seed: int) -> np.ndarray:
    k = max(1, int(round(n * keep_frac)))
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


@dataclass
class ComparisonSelection:
    method: str  # metarater | uniform | intersection | random | rater:<name> | metarater@N=<n>
    indices: np.ndarray  # sorted candidate indices
    seed: int  # proxy seed (and the random selection's seed)
    info: dict[str, float]


Select = Callable[[np.ndarray], np.ndarray]  # a score per candidate -> sorted chosen candidate indices


def comparison_selections(scaled: np.ndarray, raters: Sequence[str], w_star: np.ndarray, keep_frac: float, *,
                          methods: Sequence[str], seeds: Sequence[int], single_raters: bool = True,
                          single_rater_seeds: Sequence[int] = (0,),
                          intersection_raters: Optional[Sequence[str]] = None,
                          select: Optional[Select] = None) -> list[ComparisonSelection]:
    """Every (method, seed) of the Table 4 analogue, in a stable order. Each method yields a score per
    candidate and ``select`` (default: the top ``keep_frac``) turns it into a selection, so every method
    obeys the same rule (the paper's token budget with fixed domain proportions, by default in the
    pipeline). ``intersection_raters``: only those present among ``raters`` are used (None, or none
    present: all)."""
    select = select or (lambda q: select_top(q, keep_frac))
    out: list[ComparisonSelection] = []
    fixed: dict[str, tuple[np.ndarray, dict[str, float]]] = {}
    if "metarater" in methods:
        fixed["metarater"] = (select(aggregate(scaled, w_star)), {})
    if "uniform" in methods:
        fixed["uniform"] = (select(aggregate(scaled, uniform_weights(len(raters)))), {})
    if "intersection" in methods:
        use = list(raters) if intersection_raters is None else [r for r in intersection_raters if r in raters]
        if not use:
            log.warning("metarater.comparisons.intersection_raters: none of %s is a rater; the intersection uses "
                        "all %d raters", list(intersection_raters or []), len(raters))
            use = list(raters)
        columns = [list(raters).index(r) for r in use]
        chosen = select(intersection_score(scaled[:, columns]))
        _, worst = intersection_order(scaled[:, columns])
        fixed["intersection"] = (chosen, {"per_rater_top_frac": float(worst[chosen].max()),
                                          "raters": float(len(columns))})
    for method in methods:
        for seed in seeds:
            if method == "random":
                noise = np.random.default_rng(seed).random(len(scaled))
                out.append(ComparisonSelection("random", select(noise), seed, {}))
            else:
                indices, info = fixed[method]
                out.append(ComparisonSelection(method, indices, seed, info))
    if single_raters:
        for j, name in enumerate(raters):
            onehot = np.zeros(len(raters))
            onehot[j] = 1.0
            indices = select(aggregate(scaled, onehot))
            out.extend(ComparisonSelection(f"rater:{name}", indices, seed, {}) for seed in single_rater_seeds)
    return out


def weights_for_n(weights: np.ndarray, losses: np.ndarray, n: int, regression: Any, *, n_candidates: int,
                  top_k: int, alpha: float, seed: int, batch: int = 100_000) -> tuple[np.ndarray, dict[str, float]]:
    """w* from the first ``n`` proxies only (Fig. 2 analogue): regression + search on that prefix."""
    model, metrics = fit_regressor(weights[:n], losses[:n], regression)
    w_star, _ = search_weights(model, weights.shape[1], n_candidates=n_candidates, top_k=top_k, alpha=alpha,
                               seed=seed, batch=batch)
    return w_star, metrics


class EvalStore:
    """Proxy evaluations of selections, one JSON file each, keyed by (bench, selection, seed).

    ``evaluate(selection, run)`` returns the stored result when there is one
    (``reused: True``), else calls ``run(indices, seed)``, stores and returns it.
    """

    def __init__(self, directory: str | Path, bench_key: str) -> None:
        self.directory = Path(directory)
        self.bench_key = bench_key

    def path(self, indices: np.ndarray, seed: int) -> Path:
        key = fingerprint(self.bench_key, array_hash(np.asarray(indices, dtype=np.int64)), int(seed))
        return self.directory / f"eval-{key}.json"

    def evaluate(self, selection: ComparisonSelection,
                 run: Callable[[np.ndarray, int], dict[str, Any]]) -> dict[str, Any]:
        path = self.path(selection.indices, selection.seed)
        if path.exists():
            return {**json.loads(path.read_text()), "reused": True}
        result = run(selection.indices, selection.seed)
        write_json(path, {**result, "method": selection.method, "selection_sha256": array_hash(
            np.asarray(selection.indices, dtype=np.int64))})
        return {**result, "reused": False}


def summarize(table: pd.DataFrame, column: str = "val_loss") -> pd.DataFrame:
    """Mean, std (ddof=1; 0 for one seed) and count of ``column`` per method, best first; with a judge set
    (``test_loss``), its mean and SE per method beside it."""
    grouped = table.groupby("method", sort=False)[column]
    out = pd.DataFrame({"val_loss_mean": grouped.mean(), "val_loss_std": grouped.std(ddof=1).fillna(0.0),
                        "seeds": grouped.count()})
    if "test_loss" in table and table["test_loss"].notna().any():
        test = table.groupby("method", sort=False)["test_loss"]
        out["test_loss_mean"] = test.mean()
        out["test_loss_se"] = (test.std(ddof=1) / np.sqrt(test.count())).fillna(0.0)
    out = out.reset_index()
    key = "test_loss_mean" if "test_loss_mean" in out else "val_loss_mean"
    return out.sort_values([key, "method"], kind="stable").reset_index(drop=True)


def paired_differences(table: pd.DataFrame, columns: Sequence[str], reference: str = "metarater") -> pd.DataFrame:
    """For each other method and loss column: the mean over proxy seeds of (other - ``reference``) on the
    same seed (> 0: the reference is lower), its standard error (sd / sqrt(seeds)) and the seed count.
    Only seeds both methods ran count."""
    rows = []
    if reference not in set(table["method"]):
        return pd.DataFrame(columns=["method", "loss", "diff_mean", "diff_se", "seeds"])
    ref = table[table["method"] == reference].set_index("seed")
    for method in [m for m in table["method"].unique() if m != reference]:
        other = table[table["method"] == method].set_index("seed")
        seeds = ref.index.intersection(other.index)
        for column in columns:
            if column not in table or len(seeds) == 0:
                continue
            d = (other.loc[seeds, column] - ref.loc[seeds, column]).astype(float).dropna()
            if len(d) == 0:
                continue
            se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
            rows.append({"method": method, "loss": column, "diff_mean": float(d.mean()), "diff_se": se,
                         "seeds": float(len(d))})
    return pd.DataFrame(rows, columns=["method", "loss", "diff_mean", "diff_se", "seeds"])


def gaps_to_metarater(summary: pd.DataFrame) -> dict[str, float]:
    """``gap_<other>_minus_metarater`` (mean val_loss of ``other`` minus w*'s; > 0: w* is lower) and, where
    the runs have spread, ``gap_<other>_minus_metarater_in_se``: the gap over the standard error of the
    difference of the two means, ``sqrt(std_o^2 / n_o + std_m^2 / n_m)``, for other = uniform, random,
    intersection. ``summary``: :func:`summarize`'s table."""
    means = summary.set_index("method")
    metrics: dict[str, float] = {}
    if "metarater" not in means.index:
        return metrics
    for other in ("uniform", "random", "intersection"):
        if other in means.index:
            gap = means.loc[other, "val_loss_mean"] - means.loc["metarater", "val_loss_mean"]
            se = np.sqrt(means.loc[other, "val_loss_std"] ** 2 / means.loc[other, "seeds"]
                         + means.loc["metarater", "val_loss_std"] ** 2 / means.loc["metarater", "seeds"])
            metrics[f"gap_{other}_minus_metarater"] = float(gap)
            if se > 0:
                metrics[f"gap_{other}_minus_metarater_in_se"] = float(gap / se)
    return metrics
