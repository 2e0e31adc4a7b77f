"""Item-sampling error of the decision metrics (issue #38): is the evaluation set large enough?

A seed's standard error says how much a difference between two corpora moves when the model is trained
again; the item-sampling error says how much it would move on *other benchmark items* of the same tasks.
The items are fixed across cells, so the decision tables' seed standard errors leave the second out
(DataDecide Sec. 3: both enter a decision). This module computes it from the per-item values an
evaluation keeps (:attr:`curation.evaluation.evaluate.TaskResult.items`).

Every decision metric is a weighted sum of per-task item means, ``M = sum_t w_t mean_i x_ti``, so its
item standard error is ``sqrt(sum_t w_t^2 var_i(x_ti) / n_t)``:

- ``mc_<metric>`` (e.g. ``mc_correct_prob_per_char``): the mean over the multiple-choice tasks of the
  item metric ``<metric>``: ``w_t = 1 / T``;
- ``average``: the mean over abilities of the mean over each ability's tasks of the task's primary metric
  (accuracy or length-normalised accuracy): ``w_t = 1 / (A x T_a)``;
- ``ref_bits_per_byte``: the mean over tasks of a ratio of sums (bits / bytes of the gold texts); each
  item enters through its linearised residual ``(bits_i - r_t bytes_i) / mean(bytes)`` (delta method).

For a *difference* between two models evaluated on the same items (:func:`paired_item_se`), ``x_ti``
is the item's difference: items that are hard for both models cancel, so it is much smaller than
either model's own item error.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

Items = Mapping[str, Mapping[str, list]]  # task -> metric -> per-item values


def metric_terms(items: Items, metric: str, tasks: Optional[Sequence[str]] = None
                 ) -> Optional[list[tuple[float, np.ndarray]]]:
    """(w_t, per-item values x_ti) of every task that enters ``metric``, so that ``metric = sum_t w_t
    mean_i x_ti``; ``tasks``: only these (the weights renormalised over them, e.g. the tasks above chance);
    None when the items do not carry it."""
    if tasks is not None:
        keep = set(tasks)
        items = {t: v for t, v in items.items() if t in keep}
    return _terms(items, metric)


def metric_value(items: Items, metric: str, tasks: Optional[Sequence[str]] = None) -> float:
    """``metric`` of one model recomputed from its per-item values (NaN when they do not carry it)."""
    terms = metric_terms(items, metric, tasks)
    return float(sum(w * float(np.mean(x)) for w, x in terms)) if terms else float("nan")


def _terms(items: Items, metric: str) -> Optional[list[tuple[float, np.ndarray]]]:
    """(w_t, per-item values x_ti) of every task that enters ``metric``; None when the items do not
    carry it."""
    from curation.evaluation.tasks import TASKS

    if metric.startswith("mc_"):
        key = metric[len("mc_"):]
        tasks = [t for t in items if key in items[t]]
        return [(1.0 / len(tasks), np.asarray(items[t][key], dtype=float)) for t in tasks] if tasks else None
    if metric == "ref_bits_per_byte":
        tasks = [t for t in items if "ref_bits" in items[t]]
        out = []
        for t in tasks:
            bits = np.asarray(items[t]["ref_bits"], dtype=float)
            size = np.asarray(items[t]["ref_bytes"], dtype=float)
            ratio = bits.sum() / size.sum()
            out.append((1.0 / len(tasks), (bits - ratio * size) / size.mean() + ratio))
        return out or None
    if metric == "average":
        primary = {t: TASKS[t].primary_metric for t in items if t in TASKS and TASKS[t].primary_metric in items[t]}
        if not primary:
            return None
        by_ability: dict[str, list[str]] = {}
        for t in primary:
            by_ability.setdefault(TASKS[t].ability, []).append(t)
        return [(1.0 / (len(by_ability) * len(ts)), np.asarray(items[t][primary[t]], dtype=float))
                for ts in by_ability.values() for t in ts]
    return None


def _se(terms: list[tuple[float, np.ndarray]]) -> float:
    var = 0.0
    for weight, values in terms:
        if len(values) < 2:
            return float("nan")
        var += weight ** 2 * float(np.var(values, ddof=1)) / len(values)
    return float(np.sqrt(var))


def item_se(items: Items, metric: str) -> float:
    """Item-sampling standard error of one model's ``metric`` (NaN when the items do not carry it)."""
    terms = _terms(items, metric)
    return _se(terms) if terms else float("nan")


def paired_item_se(items_a: Items, items_b: Items, metric: str) -> float:
    """Item-sampling standard error of ``metric(a) - metric(b)`` for two models scored on the same items
    (the same tasks, subsample and order); NaN when either does not carry the metric."""
    ta, tb = _terms(items_a, metric), _terms(items_b, metric)
    if not ta or not tb or len(ta) != len(tb):
        return float("nan")
    diffs = []
    for (wa, va), (_, vb) in zip(ta, tb):
        if len(va) != len(vb):
            raise ValueError(f"paired_item_se: {len(va)} items against {len(vb)}: not the same evaluation items")
        diffs.append((wa, va - vb))
    return _se(diffs)


def items_for(se_now: float, n_now: int, target: float) -> int:
    """Items per task for which an item error of ``se_now`` at ``n_now`` items falls to ``target``
    (se ~ 1 / sqrt(n)); -1 when undefined."""
    if not (np.isfinite(se_now) and np.isfinite(target)) or target <= 0 or n_now <= 0:
        return -1
    return int(np.ceil(n_now * (se_now / target) ** 2))
