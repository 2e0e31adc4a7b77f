"""Seeds until the leader is decided (issue #51 item 2): rounds of one seed after decide's first cells.

After the first round (``decide.seeds`` for every candidate), while the leader on the headline metric at the top
scale is not decided against each runner-up, one more seed (its own selection draw with ``decide.draws:
per_seed``) is trained for the leader and the runners-up it is not yet separated from, and the decisions are
made again over the looks (:mod:`curation.reporting.decide_sequential`: alpha spending across the looks, Holm
across the pairs). It stops when the leader is decided against every other candidate (or equal within
``decide.equivalence``), or at ``decide.max_seeds``, ``decide.max_cells`` or ``decide.max_hours``. Rounds train at
the top scale only (the one the answer is given at). Each cell is cached by content like the first round's, and
the choice of the next round is a function of the finished cells, so a killed run re-run takes the same rounds
and loads what it had. No Kedro or MLflow here.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

# (candidates, training seed) -> the new cells and their items, trained at the top scale
RunMore = Callable[[list[str], int], tuple[pd.DataFrame, dict]]


@dataclass
class Stop:
    """Why the rounds ended, and what each candidate got."""

    reason: str
    rounds: int
    seeds: dict[str, int] = field(default_factory=dict)


def top_scale(cells: pd.DataFrame) -> tuple[str, str, int]:
    """(scale, size, training tokens) of the top scale: the answer's, the one rounds add seeds to."""
    from curation.reporting.decide import scales

    top = scales(cells)[-1]
    row = cells[cells["scale"].astype(str) == str(top)].iloc[0]
    return str(top), str(row["size"]), int(row["rung_tokens"])


def state(cells: pd.DataFrame, items: Mapping[tuple, Any], cfg: Any,
          chance: Optional[Mapping[str, float]] = None) -> tuple[dict[str, float], dict, dict, str, bool]:
    """(means, decided, equal, headline, higher is better) at the top scale, decided as the report will decide
    them (:func:`curation.reporting.decide.build_report`: the tasks :func:`curation.reporting.decide.tasks_above_chance`
    keeps, the looks, the family)."""
    from curation.reporting.decide import (_top_scale_sequential, decision_table, headline_metric, round_state,
                                           tasks_above_chance)
    from curation.reporting.decide_stats import cell_metric, signal_to_noise
    from curation.reporting.decisions import higher_is_better

    top, _, _ = top_scale(cells)
    restrict = tasks_above_chance(items, top, chance, cfg.min_tasks_above_chance).restrict
    at_top = cells[cells["scale"].astype(str) == top]
    order = list(cfg.candidates)
    table = _top_scale_sequential(decision_table(at_top, items, order=order, tasks=restrict), at_top, items, cfg,
                                  top, order, restrict)
    headline, _ = headline_metric(signal_to_noise(table), cfg.headline, scale=top)
    rows = table[table["metric"] == headline]
    values = cell_metric(at_top, items, headline, (restrict or {}).get(headline))
    means, decided, equal = round_state(at_top, values, rows, cfg.equivalence)
    return means, decided, equal, headline, higher_is_better(headline)


def add_seed_rounds(cells: pd.DataFrame, items: dict, cfg: Any, run_more: RunMore,
                    chance: Optional[Mapping[str, float]] = None, started: Optional[float] = None,
                    on_round: Optional[Callable[[int, list[str], str], None]] = None
                    ) -> tuple[pd.DataFrame, dict, Stop]:
    """Rounds of one seed (see the module) after the first cells (``cells`` with ``round`` 1): returns every cell
    (``round`` numbered), every cell's items and why it stopped. ``run_more(candidates, seed)`` trains and
    evaluates the new cells at the top scale; ``on_round(round, candidates, why)`` is told before each."""
    from curation.reporting.decide_sequential import next_round

    t0 = time.perf_counter() if started is None else started
    cells = cells.assign(round=cells["round"] if "round" in cells else 1)
    top, _, _ = top_scale(cells)

    def seeds_of() -> dict[str, int]:
        at = cells[cells["scale"].astype(str) == top]
        return at.groupby("candidate")["seed"].nunique().to_dict()

    if cfg.max_seeds is None:
        return cells, items, Stop("decide.max_seeds is unset: one look at the first seeds (the fixed design)", 1,
                                  seeds_of())
    rounds = int(cells["round"].max())
    last_round_s = None
    while True:
        means, decided, equal, headline, higher = state(cells, items, cfg, chance)
        want, why = next_round(means, decided, seeds_of(), int(cfg.max_seeds), higher, equal)
        if not want:
            return cells, items, Stop(why, rounds, seeds_of())
        if cfg.max_cells is not None and len(cells) + len(want) > int(cfg.max_cells):
            return cells, items, Stop(f"decide.max_cells={cfg.max_cells} reached ({len(cells)} cells; the next round "
                                      f"needs {len(want)} more) with {why}", rounds, seeds_of())
        elapsed = time.perf_counter() - t0
        if cfg.max_hours is not None and last_round_s is not None and \
                elapsed + last_round_s > float(cfg.max_hours) * 3600:
            return cells, items, Stop(f"decide.max_hours={cfg.max_hours} reached ({elapsed / 3600:.2f} h; the last "
                                      f"round took {last_round_s / 60:.1f} min) with {why}", rounds, seeds_of())
        seed = int(cells["seed"].max()) + 1
        rounds += 1
        log.info("decide: round %d on %s: seed %d for %s", rounds, headline, seed, ", ".join(want))
        if on_round is not None:
            on_round(rounds, want, why)
        t1 = time.perf_counter()
        new, new_items = run_more(want, seed)
        last_round_s = time.perf_counter() - t1
        cells = pd.concat([cells, new.assign(round=rounds)], ignore_index=True)
        items = {**items, **new_items}
