"""The top rung trained again as an independent replication (issue #51 item 4, ``decide.fresh_top``).

DataDecide's decision accuracy asks whether the order a cheap rung gives is the order the expensive one gives.
When every rung reuses the same selection draws, training seeds and evaluation items, the top rung is a
re-training of the same experiment (per-item differences correlate 0.39-0.52 between rungs on the bundled
ladder), so agreement with it is partly agreement with itself. The fresh replicate trains the top rung's
(size, tokens) again with training seeds offset by :data:`FRESH_SEED_OFFSET` (so, with ``decide.draws:
per_seed``, fresh selection draws too) and evaluates on items of the same tasks disjoint from the ladder's
(``eval.exclude_seed``); its cells carry the scale ``<top>-fresh``, which :func:`curation.reporting.decide.scales`
puts last, so every rung, the re-used top included, is checked against it. No Kedro or MLflow here.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import pandas as pd

FRESH_SEED_OFFSET = 1000  # training seeds of the replicate: none a ladder of fewer seeds uses
FRESH_SUFFIX = "-fresh"


def fresh_eval(eval_config: Mapping[str, Any]) -> dict[str, Any]:
    """The evaluation block of the replicate: the next subsample seed, leaving out the ladder's items."""
    seed = int(eval_config.get("seed", 0) or 0)
    return {**dict(eval_config), "seed": seed + 1, "exclude_seed": seed}


def fresh_seeds(seeds: list[int]) -> list[int]:
    return [int(s) + FRESH_SEED_OFFSET for s in seeds]


def as_fresh(cells: pd.DataFrame, items: Mapping[tuple, Any]) -> tuple[pd.DataFrame, dict]:
    """The replicate's cells and items under the scale ``<scale>-fresh``."""
    cells = cells.assign(scale=cells["scale"].astype(str) + FRESH_SUFFIX)
    return cells, {(f"{scale}{FRESH_SUFFIX}", c, s): v for (scale, c, s), v in items.items()}


def add_fresh_top(cells: pd.DataFrame, items: dict, seeds: list[int], eval_config: Mapping[str, Any],
                  run_top: Callable[[list[int], dict], tuple[pd.DataFrame, dict]]) -> tuple[pd.DataFrame, dict]:
    """Every cell with the replicate's appended: ``run_top(training seeds, eval block)`` trains and evaluates
    every candidate at the top scale."""
    new, new_items = run_top(fresh_seeds(seeds), fresh_eval(eval_config))
    new, new_items = as_fresh(new, new_items)
    return pd.concat([cells, new.assign(round=1)], ignore_index=True), {**items, **new_items}
