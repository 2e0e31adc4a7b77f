"""A data decision's error from every source, and a test that is right at three seeds (issue #43).

A decide cell is one (candidate, scale, training seed), scored on one fixed, seeded set of evaluation items.
The difference between two candidates on a metric then carries two errors a decision must count:

- **seeds**: train again and the difference moves (paired by seed: the seed's own luck, and with
  ``decide.draws=per_seed`` the selection's own draw, cancel only as far as they are shared). Its variance is
  ``v_seed = var_s(d_s) / n`` over the n per-seed differences ``d_s``;
- **items**: score on other items of the same tasks and it moves too. Every decision metric is
  ``sum_t w_t mean_i x_ti`` (:func:`curation.evaluation.items.metric_terms`), so the item variance of the
  seed-averaged difference is ``v_item = sum_t w_t^2 var_i(xbar_ti) / n_t`` where ``xbar_ti`` is item i's
  difference averaged over the seeds. Items hard for both candidates cancel here (the covariance between
  paired cells is inside ``xbar``).

The full standard error is ``sqrt(v_seed + v_item)`` (the variance sum; the seed x item interaction enters
both parts, so it is counted twice: conservative by ``sigma_int^2 / (n N)``). ``v_seed`` rests on n - 1
degrees of freedom, ``v_item`` on ``N - T`` (items minus tasks), so ``mean / se`` is not Student's t with
either; it is tested with Cochran and Cox's critical value, the two parts' t quantiles weighted by their
variances (Cochran & Cox 1950; for Behrens-Fisher problems). In a simulation of null differences with 3 seeds
and 10 x 100 items (tests/reports/test_decide_full_se.py) it rejects at most 5% at alpha 0.05 whatever the
seed/item ratio, where Welch-Satterthwaite's df reaches 7-8% when the two parts are alike and n - 1 df on the
full SE rejects under 1% when items dominate.

A pair is ``decided`` when its p, Holm-corrected over the K(K-1)/2 pairs of its (scale, metric), is below
``alpha``: the recommendation rests on a subset of these comparisons (the leader against each other
candidate), so each of its claims holds at the family's level.

No Kedro or MLflow here.
"""

from __future__ import annotations

from itertools import combinations
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from curation.reporting.decisions import higher_is_better, holm  # one Holm for every decision table

ALPHA = 0.05
Items = Mapping[str, Mapping[str, list]]  # task -> metric -> per-item values
CellItems = Mapping[tuple, Items]  # (scale, candidate, seed) -> items


def critical_value(alpha: float, v_seed: float, v_item: float, df_seed: float, df_item: float) -> float:
    """Cochran-Cox's two-sided critical value of ``mean / sqrt(v_seed + v_item)`` at ``alpha``."""
    from scipy.special import stdtrit  # Student's t quantile: what scipy.stats.t.isf computes, without its overhead

    total = v_seed + v_item
    if total <= 0:
        return float("nan")
    ts = -stdtrit(df_seed, alpha / 2) if v_seed > 0 else 0.0
    ti = -stdtrit(df_item, alpha / 2) if v_item > 0 else 0.0
    return float((v_seed * ts + v_item * ti) / total)


def cochran_cox_p(mean: float, v_seed: float, v_item: float, df_seed: float, df_item: float) -> float:
    """The smallest alpha at which ``|mean| / sqrt(v_seed + v_item)`` exceeds :func:`critical_value` (the
    test's two-sided p-value); with ``v_item = 0`` it is the paired t-test's p on ``df_seed``."""
    from scipy.optimize import brentq

    if not (np.isfinite(mean) and np.isfinite(v_seed) and np.isfinite(v_item)) or df_seed <= 0:
        return float("nan")
    total = v_seed + v_item
    if total == 0:
        return 0.0 if mean != 0 else 1.0
    t = abs(mean) / np.sqrt(total)
    if t == 0:
        return 1.0
    # critical_value falls from +inf (alpha -> 0) to 0 (alpha = 1): one root in log10(alpha). Deep in the tail
    # scipy's t quantile breaks down (-inf at alpha 1e-300 for 3 to ~10 degrees of freedom, where the true value is
    # ~1e100): a non-finite or negative critical value there is the +inf it stands for, not a rejection.
    def f(u: float) -> float:
        c = critical_value(10.0 ** u, v_seed, v_item, df_seed, df_item)
        return (c if np.isfinite(c) and c >= 0 else 1e300) - t

    if f(-300.0) < 0:
        return 1e-300
    return float(10.0 ** brentq(f, -300.0, 0.0, xtol=1e-10))


def item_variance(items_a: Sequence[Items], items_b: Sequence[Items], metric: str,
                  tasks: Optional[Sequence[str]] = None) -> tuple[float, int, int]:
    """(v_item, items, tasks) of the seed-averaged difference ``a - b``: ``items_a[k]`` and ``items_b[k]`` are
    the same seed's cells (for a single candidate pass ``items_b=[]``: its own item variance). NaN when a cell
    lacks the metric's items."""
    from curation.evaluation.items import metric_terms

    per_seed = []
    for k, cell in enumerate(items_a):
        ta = metric_terms(cell, metric, tasks)
        if not ta:
            return float("nan"), 0, 0
        if items_b:
            tb = metric_terms(items_b[k], metric, tasks)
            if not tb or len(tb) != len(ta):
                return float("nan"), 0, 0
            for (_, va), (_, vb) in zip(ta, tb):
                if len(va) != len(vb):
                    raise ValueError(f"{metric}: {len(va)} items against {len(vb)}: not the same evaluation items")
            ta = [(w, va - vb) for (w, va), (_, vb) in zip(ta, tb)]
        per_seed.append(ta)
    if not per_seed:
        return float("nan"), 0, 0
    var, n_items = 0.0, 0
    for t, (weight, _) in enumerate(per_seed[0]):
        xbar = np.mean([terms[t][1] for terms in per_seed], axis=0)
        if len(xbar) < 2:
            return float("nan"), 0, 0
        var += weight ** 2 * float(np.var(xbar, ddof=1)) / len(xbar)
        n_items += len(xbar)
    return var, n_items, len(per_seed[0])


def cell_metric(cells: pd.DataFrame, items: Optional[CellItems], metric: str,
                tasks: Optional[Sequence[str]] = None) -> pd.Series:
    """Each cell's ``metric`` (index: the cells' index): recomputed from its items when ``tasks`` restricts
    the tasks, else the cell table's value."""
    from curation.evaluation.items import metric_value

    if tasks is None or items is None:
        return cells[metric].astype(float) if metric in cells else pd.Series(np.nan, index=cells.index)
    scale = _scale_column(cells)
    return pd.Series([metric_value(items.get((str(r[scale]), str(r["candidate"]), int(r["seed"])), {}), metric, tasks)
                      for _, r in cells.iterrows()], index=cells.index, dtype=float)


def _scale_column(cells: pd.DataFrame) -> str:
    return "scale" if "scale" in cells.columns else "size"


def full_decisions(cells: pd.DataFrame, items: Optional[CellItems], metrics: Sequence[str],
                   order: Optional[Sequence[str]] = None, tasks: Optional[Mapping[str, Sequence[str]]] = None,
                   alpha: float = ALPHA) -> pd.DataFrame:
    """One row per (scale, pair of candidates, metric): ``mean_a``, ``mean_b``, ``mean_diff`` (a - b),
    ``se_seed``, ``se_item``, ``se`` (both), ``seeds``, ``df_seed``, ``items``, ``p`` (Cochran-Cox),
    ``p_holm`` (over the pairs of its scale and metric), ``decided`` (p_holm < alpha), ``winner``,
    ``verdict``, ``sd_a`` / ``sd_b`` (seed sd of each side) and ``draws_a`` / ``draws_b`` (distinct
    selections each side trained on). ``tasks``: metric -> the tasks its value and errors are computed over
    (default: every task the cell table averaged). Without items (``items`` None or a cell missing), ``se_item``
    is NaN and no pair is decided: a decision needs both parts."""
    scale_col = _scale_column(cells)
    frames = []
    for scale in dict.fromkeys(cells[scale_col]):
        part = cells[cells[scale_col] == scale]
        names = list(dict.fromkeys(part["candidate"]))
        if order is not None:
            names = [c for c in order if c in names] + [c for c in names if c not in order]
        for metric in metrics:
            keep = (tasks or {}).get(metric)
            values = cell_metric(part, items, metric, keep)
            by = {c: values[part["candidate"] == c].set_axis(part.loc[part["candidate"] == c, "seed"].astype(int))
                  .dropna() for c in names}
            rows = []
            for a, b in combinations(names, 2):
                sa, sb = by[a], by[b]
                seeds = sorted(set(sa.index) & set(sb.index))
                if len(seeds) < 2:
                    continue
                d = (sa.loc[seeds] - sb.loc[seeds]).to_numpy(float)
                mean, v_seed = float(d.mean()), float(d.var(ddof=1) / len(d))
                cells_a = [items.get((str(scale), a, s)) for s in seeds] if items is not None else []
                cells_b = [items.get((str(scale), b, s)) for s in seeds] if items is not None else []
                if items is not None and all(cells_a) and all(cells_b):
                    v_item, n_items, n_tasks = item_variance(cells_a, cells_b, metric, keep)
                else:
                    v_item, n_items, n_tasks = float("nan"), 0, 0
                df_seed, df_item = float(len(seeds) - 1), float(max(n_items - n_tasks, 1))
                p = cochran_cox_p(mean, v_seed, v_item, df_seed, df_item) if np.isfinite(v_item) else float("nan")
                rows.append({"scale": scale, "corpus_a": a, "corpus_b": b, "metric": metric,
                             "mean_a": float(sa.loc[seeds].mean()), "mean_b": float(sb.loc[seeds].mean()),
                             "mean_diff": mean, "se_seed": float(np.sqrt(v_seed)),
                             "se_item": float(np.sqrt(v_item)) if np.isfinite(v_item) else float("nan"),
                             "se": float(np.sqrt(v_seed + v_item)) if np.isfinite(v_item) else float("nan"),
                             "seeds": len(seeds), "df_seed": df_seed, "items": n_items, "p": p,
                             "sd_a": float(sa.std(ddof=1)), "sd_b": float(sb.std(ddof=1)),
                             "draws_a": _draws(part, a), "draws_b": _draws(part, b)})
            if not rows:
                continue
            table = pd.DataFrame(rows)
            table["p_holm"] = holm(table["p"].to_numpy())
            table["decided"] = (table["p_holm"] < alpha) & (table["mean_diff"] != 0)
            better_a = (table["mean_diff"] > 0) == higher_is_better(metric)
            table["winner"] = np.where(table["decided"], np.where(better_a, table["corpus_a"], table["corpus_b"]), "")
            table["verdict"] = [verdict(r, metric, alpha) for _, r in table.iterrows()]
            frames.append(table)
    columns = ["scale", "corpus_a", "corpus_b", "metric", "mean_a", "mean_b", "mean_diff", "se_seed", "se_item", "se",
               "seeds", "df_seed", "items", "p", "p_holm", "decided", "winner", "verdict", "sd_a", "sd_b",
               "draws_a", "draws_b"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def _draws(part: pd.DataFrame, candidate: str) -> int:
    if "corpus_digest" not in part:
        return 1
    return int(part.loc[part["candidate"] == candidate, "corpus_digest"].nunique())


def verdict(r: pd.Series, metric: str, alpha: float = ALPHA, *, looks: Optional[int] = None,
            decided_at_seeds: int = 0, over: str = "") -> str:
    """The one wording of a decision row's ``verdict`` (``mean_diff``, ``se``, ``p``, ``p_holm``, ``decided``,
    ``winner``, ``corpus_a`` / ``corpus_b``). The fixed design (:func:`full_decisions`): ``looks`` None. The
    sequential one (:func:`curation.reporting.decide_sequential.relabel`): ``looks`` (named when more than
    one), ``decided_at_seeds`` (the seeds at which a decided pair crossed) and ``over`` (the Holm family, e.g.
    "its metric's pairs")."""
    if not np.isfinite(r["se"]):
        return f"no decision on {metric}: no item values (the item part of the error is unknown)"
    sequential = looks is not None
    named = f"{int(looks)} looks, " if sequential and int(looks) > 1 else ""
    family = f" over {over}" if sequential else ""
    if r["decided"]:
        loser = r["corpus_b"] if r["winner"] == r["corpus_a"] else r["corpus_a"]
        how = (f"p = {r['p']:.2g}; {named}decided at {int(decided_at_seeds)} seeds, Holm {r['p_holm']:.2g}{family}"
               if sequential else f"p = {r['p']:.2g}, Holm {r['p_holm']:.2g}")
        return f"{r['winner']} beats {loser} on {metric} by {abs(r['mean_diff']):.4g} ± {r['se']:.2g} ({how})"
    return (f"no decision on {metric}: {r['mean_diff']:+.4g} ± {r['se']:.2g} ({named}Holm p = {r['p_holm']:.2g} "
            f">= {alpha}{family})")


def equal_within(r: pd.Series, margin: float) -> bool:
    """A pair decided equal within ``margin`` (``decide.equivalence``): its 90% interval, mean_diff +- 1.645 se,
    inside +-margin (two one-sided tests at 5%); never without a finite ``se``."""
    return bool(np.isfinite(r["se"]) and abs(r["mean_diff"]) + 1.645 * r["se"] < float(margin))


def ranking(cells: pd.DataFrame, metric: str, scale: str, values: Optional[pd.Series] = None) -> pd.DataFrame:
    """Candidates by the seed mean of ``metric`` at ``scale``, best first (losses ascending); ``values``: the
    cells' metric when it is not the table's column (e.g. recomputed over the tasks above chance)."""
    col = "scale" if "scale" in cells.columns else "size"
    mask = cells[col].astype(str) == str(scale)
    frame = pd.DataFrame({"candidate": cells.loc[mask, "candidate"],
                          "value": (values if values is not None else cells[metric])[mask]})
    stats = frame.groupby("candidate", sort=False)["value"].agg(["mean", "std", "count"]).reset_index()
    return stats.sort_values("mean", ascending=not higher_is_better(metric), kind="stable").reset_index(drop=True)


def signal_to_noise(table: pd.DataFrame) -> pd.DataFrame:
    """Per (scale, metric): ``signal`` (sd over candidates of their means), ``noise`` (the rms full SE of a
    paired difference over the pairs, / sqrt 2: the error of one candidate's mean against the others) and
    ``snr`` = signal / noise (about 1 when the candidates do not differ; the metric that separates the
    candidates most per unit of error has the largest). After Heineman et al. 2025 (allenai, *Signal and
    Noise*), with the seed-and-item error of this run as the noise."""
    rows = []
    for (scale, metric), part in table.groupby(["scale", "metric"], sort=False):
        means = pd.concat([part.set_index("corpus_a")["mean_a"], part.set_index("corpus_b")["mean_b"]])
        means = means[~means.index.duplicated()]
        noise = float(np.sqrt(np.nanmean(part["se"].to_numpy(float) ** 2) / 2)) if part["se"].notna().any() else np.nan
        signal = float(means.std(ddof=1)) if len(means) > 1 else float("nan")
        rows.append({"scale": scale, "metric": metric, "candidates": len(means), "signal": signal, "noise": noise,
                     "snr": signal / noise if noise and np.isfinite(noise) and noise > 0 else float("nan")})
    return pd.DataFrame(rows, columns=["scale", "metric", "candidates", "signal", "noise", "snr"])


def task_chance(items: CellItems, scale: str, chance: Mapping[str, float]) -> pd.DataFrame:
    """Per task at ``scale``: its primary metric (accuracy or length-normalised accuracy) pooled over every
    cell, the chance level, the item SE of the pooled value, ``at_chance`` (not above chance by 2 SE, one-sided)
    and ``status``: ``above`` chance, ``below`` it by more than 2 SE (the models prefer wrong answers: a bias of
    the task's choices, e.g. length or frequency, not a lack of signal), or ``at`` it. Which tasks the
    multiple-choice metrics then average is :func:`curation.reporting.decide.tasks_above_chance`'s rule."""
    from curation.evaluation.tasks import TASKS

    cells = [v for (s, _, _), v in items.items() if str(s) == str(scale)]
    rows = []
    for task in dict.fromkeys(t for cell in cells for t in cell):
        key = TASKS[task].primary_metric if task in TASKS else "acc"
        stacks = [np.asarray(cell[task][key], dtype=float) for cell in cells if task in cell and key in cell[task]]
        if not stacks or task not in chance:
            continue
        pooled = np.mean(stacks, axis=0)
        value, se = float(pooled.mean()), float(pooled.std(ddof=1) / np.sqrt(len(pooled)))
        c = float(chance[task])
        status = "above" if value - c > 2 * se else ("below" if c - value > 2 * se else "at")
        rows.append({"task": task, "metric": key, "value": value, "chance": c, "se": se,
                     "items": len(pooled), "at_chance": bool(value - c <= 2 * se), "status": status})
    return pd.DataFrame(rows, columns=["task", "metric", "value", "chance", "se", "items", "at_chance", "status"])


def chance_levels(eval_config: Mapping) -> dict[str, float]:
    """Task -> the chance level of its multiple-choice items (mean of 1 / choices over the same seeded
    subsample the cells were scored on)."""
    from curation.evaluation.config import parse_eval_config
    from curation.evaluation.tasks import TaskUnavailable, load_task

    cfg = parse_eval_config(eval_config)
    out = {}
    for name in cfg.tasks:
        try:
            task = load_task(name, limit=cfg.limit_for(name), seed=cfg.seed, data_dir=cfg.data_dir,
                             exclude_seed=cfg.exclude_seed)
        except (TaskUnavailable, KeyError):
            continue
        if task.spec.kind == "multiple_choice" and task.items:
            out[name] = float(np.mean([1.0 / len(item.continuations) for item in task.items]))
    return out


def seeds_and_items_needed(diff: float, se_seed: float, se_item: float, seeds: int, items: int,
                           family: int = 1, total_items: int = 0, alpha: float = ALPHA,
                           power_z: float = 0.84) -> tuple[int, int]:
    """(seeds, items per task) at which a true difference ``diff`` would be decided with 80% power: its
    |diff| / full SE clears this test's critical value (:func:`critical_value` at the new degrees of freedom,
    at ``alpha / family``: Holm's first step over the ``family`` pairs of its metric) plus ``power_z``. Seeds
    at today's items (``se_seed ~ 1/sqrt(seeds)``), up to 64; items per task at today's seeds
    (``se_item ~ 1/sqrt(items)``), up to 100x today's; -1 where that alone never gets there (e.g. more items
    when the seed part with 2 degrees of freedom is the obstacle). A planning estimate from today's errors."""
    if not (np.isfinite(diff) and diff != 0 and np.isfinite(se_seed)):
        return -1, -1
    vs, vi = se_seed ** 2, se_item ** 2 if np.isfinite(se_item) else 0.0
    df_item = max(total_items - 1, 1)
    level = alpha / max(family, 1)

    def decides(v_seed: float, v_item: float, n: int, k: float) -> bool:
        se = np.sqrt(v_seed + v_item)
        return se > 0 and abs(diff) / se >= critical_value(level, v_seed, v_item, n - 1, df_item * k) + power_z

    need_seeds = _seeds_at(decides, vs, vi, seeds)
    need_items = next((int(np.ceil(items * k)) for k in (1, 1.5, 2, 3, 4, 6, 8, 12, 16, 25, 50, 100)
                       if items > 0 and decides(vs, vi / k, seeds, k)), -1)
    return need_seeds, need_items


def _seeds_at(decides, vs: float, vi: float, seeds: int) -> int:
    return next((n for n in range(max(seeds, 2), 65) if decides(vs * seeds / n, vi, n, 1.0)), -1)


def seeds_needed_interval(diff: float, se_seed: float, se_item: float, seeds: int, family: int = 1,
                          total_items: int = 0, alpha: float = ALPHA, power_z: float = 0.84,
                          level: float = 0.95) -> tuple[int, int, int]:
    """(low, estimate, high) of :func:`seeds_and_items_needed`'s seeds: the estimate at today's seed variance,
    and the seeds needed at the ends of that variance's ``level`` chi-square interval (``seeds - 1`` degrees of
    freedom: at 3 seeds the variance is known to a factor of ~40, and so is the answer). -1: more than 64."""
    from scipy.stats import chi2

    est, _ = seeds_and_items_needed(diff, se_seed, se_item, seeds, 1, family, total_items, alpha, power_z)
    if est < 0 and not np.isfinite(se_seed):
        return -1, -1, -1
    df = max(seeds - 1, 1)
    ends = []
    for q in ((1 + level) / 2, (1 - level) / 2):  # large chi2 -> small variance -> fewer seeds
        scale = df / chi2.ppf(q, df)
        ends.append(seeds_and_items_needed(diff, se_seed * np.sqrt(scale), se_item, seeds, 1, family, total_items,
                                           alpha, power_z)[0])
    return ends[0], est, ends[1]
