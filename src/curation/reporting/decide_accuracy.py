"""Decision accuracy with its uncertainty (issue #51 item 4; DataDecide, Magnusson et al. 2025, Sec. 3).

DataDecide's decision accuracy of a cheap rung is the share of all candidate pairs it orders as the expensive one
does. With 8 candidates that is 28 pairs, each read from means over a few seeds on a few hundred items of ten
tasks, so the share itself has an error: :func:`accuracy_intervals` puts a **hierarchical bootstrap** interval on
it, resampling in every replicate the evaluation **tasks** (the same tasks at every rung: tasks are a source of
error, so a share that rests on two tasks' quirks widens), the **items** within each task (shared by the rungs that
scored the same items; drawn apart for a replicate scored on its own items), and the **training seeds** at each
scale (with ``decide.draws: per_seed`` each seed is its own selection draw, so the draws are resampled with them).
Each candidate's metric is recomputed from its cells' items (:func:`curation.evaluation.items.metric_terms`: the
task weights renormalised over the resampled tasks) and the pairs' signs compared. Beside it, the share of the
pairs decided at the cheap rung whose sign holds at the top, with its exact (Clopper-Pearson) binomial interval
over those pairs. No Kedro or MLflow here.
"""

from __future__ import annotations

from itertools import combinations
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

REPS = 1000


def _arrays(items: Mapping[tuple, Mapping], scale: str, names: Sequence[str], seeds: Sequence[int], metric: str,
            tasks: Optional[Sequence[str]]) -> Optional[tuple[np.ndarray, list[np.ndarray]]]:
    """(task weights, [per task: candidates x seeds x items]) of one scale, or None where an item is missing."""
    from curation.evaluation.items import metric_terms

    per_cell = {}
    for c in names:
        for s in seeds:
            cell = items.get((scale, c, int(s)))
            terms = metric_terms(cell, metric, tasks) if cell else None
            if not terms:
                return None
            per_cell[(c, s)] = terms
    first = per_cell[(names[0], seeds[0])]
    weights = np.array([w for w, _ in first], dtype=float)
    stacks = []
    for t in range(len(first)):
        try:
            stacks.append(np.array([[per_cell[(c, s)][t][1] for s in seeds] for c in names], dtype=float))
        except ValueError:  # ragged: not the same items in every cell
            return None
    return weights, stacks


def _signs(means: np.ndarray, pairs: list[tuple[int, int]]) -> np.ndarray:
    return np.array([np.sign(means[..., a] - means[..., b]) for a, b in pairs])


def accuracy_intervals(cells: pd.DataFrame, items: Mapping[tuple, Mapping], top: str, lower: Sequence[str],
                       metrics: Sequence[str], tasks: Optional[Mapping[str, Sequence[str]]] = None,
                       reps: int = REPS, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Per (lower scale, metric): ``sign_agreement_all`` (the point estimate, from the cells' items), ``acc_low``
    and ``acc_high`` (the hierarchical bootstrap's ``level`` interval), ``pairs`` and ``bootstrap_reps``.

    ``top``: the scale taken as the truth; scales whose items are keyed alike (same ``(task, item)`` positions:
    every rung of one ladder) share each replicate's item draw; the top gets its own when its items differ (a
    fresh replicate, ``eval.exclude_seed``)."""
    names = list(dict.fromkeys(cells["candidate"]))
    pairs = list(combinations(range(len(names)), 2))
    rng = np.random.default_rng(seed)
    rows = []
    for metric in metrics:
        keep = (tasks or {}).get(metric)
        data = {}
        for scale in [*lower, top]:
            part = cells[cells["scale"].astype(str) == str(scale)]
            seeds = sorted(set.intersection(*(set(part.loc[part["candidate"] == c, "seed"].astype(int))
                                              for c in names))) if len(part) else []
            got = _arrays(items, str(scale), names, seeds, metric, keep) if len(seeds) >= 2 else None
            if got is not None:
                data[scale] = got
        if top not in data:
            continue
        n_tasks = len(data[top][0])
        fresh_items = str(top).endswith("-fresh")
        point = {s: _signs(_value(*data[s]), pairs) for s in data}
        boot = {s: [] for s in data if s != top}
        for _ in range(reps):
            t_idx = rng.integers(0, n_tasks, n_tasks)
            shared = [rng.integers(0, data[top][1][t].shape[2], data[top][1][t].shape[2]) for t in range(n_tasks)]
            own = [rng.integers(0, data[top][1][t].shape[2], data[top][1][t].shape[2]) for t in range(n_tasks)] \
                if fresh_items else shared
            top_sign = _signs(_value(*data[top], t_idx, own, rng), pairs)
            for s in boot:
                if len(data[s][0]) != n_tasks:
                    continue
                boot[s].append(float(np.mean(_signs(_value(*data[s], t_idx, shared, rng), pairs) == top_sign)))
        for s in boot:
            if not boot[s]:
                continue
            q = np.quantile(boot[s], [(1 - level) / 2, (1 + level) / 2])
            rows.append({"small": s, "large": top, "metric": metric, "pairs": len(pairs),
                         "sign_agreement_items": float(np.mean(point[s] == point[top])),
                         "acc_low": float(q[0]), "acc_high": float(q[1]), "bootstrap_reps": reps})
    return pd.DataFrame(rows, columns=["small", "large", "metric", "pairs", "sign_agreement_items", "acc_low",
                                       "acc_high", "bootstrap_reps"])


def _value(weights: np.ndarray, stacks: list[np.ndarray], t_idx: Optional[np.ndarray] = None,
           i_idx: Optional[list[np.ndarray]] = None, rng: Optional[np.random.Generator] = None) -> np.ndarray:
    """Each candidate's metric (seed mean of sum_t w_t mean_i x_ti) on resampled tasks, items and seeds."""
    if t_idx is None:
        per_task = [x.mean(axis=2) for x in stacks]  # candidates x seeds
        total = sum(w * v for w, v in zip(weights, per_task))
        return total.mean(axis=1)
    n_seeds = stacks[0].shape[1]
    s_idx = rng.integers(0, n_seeds, n_seeds)
    w = weights[t_idx]
    w = w / w.sum()
    total = 0.0
    for wj, t in zip(w, t_idx):
        x = stacks[t]
        idx = i_idx[t] if x.shape[2] == len(i_idx[t]) else rng.integers(0, x.shape[2], x.shape[2])
        total = total + wj * x[:, s_idx][:, :, idx].mean(axis=2)
    return total.mean(axis=1)


def decided_interval(holds: int, decided: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval of ``holds`` of ``decided`` (NaN, NaN when nothing was decided)."""
    from scipy.stats import beta

    if decided <= 0:
        return float("nan"), float("nan")
    a = (1 - level) / 2
    low = 0.0 if holds == 0 else float(beta.ppf(a, holds, decided - holds + 1))
    high = 1.0 if holds == decided else float(beta.ppf(1 - a, holds + 1, decided - holds))
    return low, high


def with_intervals(agreement: pd.DataFrame, cells: pd.DataFrame, items: Optional[Mapping[tuple, Mapping]],
                   tasks: Optional[Mapping[str, Sequence[str]]] = None, reps: int = REPS) -> pd.DataFrame:
    """:func:`curation.reporting.decide.ladder_agreement`'s table with ``acc_low`` / ``acc_high`` (the bootstrap
    interval of ``sign_agreement_all``) and ``holds_low`` / ``holds_high`` (the decided-only share's)."""
    if agreement.empty:
        return agreement
    out = agreement.copy()
    held = [decided_interval(int(h), int(d)) for h, d in zip(out["sign_holds"], out["decided_small"])]
    out["holds_low"], out["holds_high"] = [h[0] for h in held], [h[1] for h in held]
    if items:
        top = str(out["large"].iloc[0])
        ci = accuracy_intervals(cells, items, top, list(dict.fromkeys(out["small"].astype(str))),
                                list(dict.fromkeys(out["metric"])), tasks, reps=reps)
        out = out.merge(ci[["small", "metric", "acc_low", "acc_high", "sign_agreement_items"]],
                        on=["small", "metric"], how="left")
    return out
