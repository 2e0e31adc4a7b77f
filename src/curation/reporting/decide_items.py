"""Each decide cell's per-item evaluation values as one long table (``decide_items.parquet``), so that a
decision's item-sampling error can be recomputed from what the run wrote (issue #43).

Columns: ``scale``, ``candidate``, ``seed``, ``task``, ``metric``, ``item`` (the item's position in the
seeded subsample, the same for every cell), ``value``.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

Items = Mapping[str, Mapping[str, list]]  # task -> metric -> per-item values
COLUMNS = ["scale", "candidate", "seed", "task", "metric", "item", "value"]


def items_frame(items: Mapping[tuple, Items]) -> pd.DataFrame:
    """(scale, candidate, seed) -> items as the long table."""
    parts = []
    for (scale, candidate, seed), tasks in items.items():
        for task, metrics in tasks.items():
            for metric, values in metrics.items():
                parts.append(pd.DataFrame({"scale": str(scale), "candidate": str(candidate), "seed": int(seed),
                                           "task": str(task), "metric": str(metric), "item": range(len(values)),
                                           "value": pd.Series(values, dtype="float64")}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def items_from_frame(frame: pd.DataFrame | Mapping) -> dict[tuple, dict[str, dict[str, list]]]:
    """The long table back as (scale, candidate, seed) -> task -> metric -> values (in item order); a mapping
    is returned as it is."""
    if not isinstance(frame, pd.DataFrame):
        return dict(frame)
    out: dict[tuple, dict[str, dict[str, list]]] = {}
    ordered = frame.sort_values(["scale", "candidate", "seed", "task", "metric", "item"], kind="stable")
    for (scale, candidate, seed, task, metric), part in ordered.groupby(
            ["scale", "candidate", "seed", "task", "metric"], sort=False):
        out.setdefault((str(scale), str(candidate), int(seed)), {}).setdefault(str(task), {})[str(metric)] = \
            part["value"].astype(float).tolist()
    return out
