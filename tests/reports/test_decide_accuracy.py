"""Decision accuracy with its uncertainty, against an independent top rung (issue #51 item 4)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.decide.replicate import FRESH_SEED_OFFSET, as_fresh, fresh_eval, fresh_seeds
from curation.reporting.decide import decision_table, ladder_agreement, scales
from curation.reporting.decide_accuracy import accuracy_intervals, decided_interval, with_intervals

METRIC = "mc_correct_prob_per_char"
KEY = "correct_prob_per_char"


def _ladder(rng, effects_low, effects_top, tasks=4, items=30, seeds=3, top="tiny@4", fresh=False):
    """Cells and items of two scales; ``effects_*``: candidate -> per-task shift of its item values."""
    rows, cell_items = [], {}
    for scale, effects, tokens, base_seed in (("tiny@1", effects_low, 1, 0),
                                              (top, effects_top, 4, FRESH_SEED_OFFSET if fresh else 0)):
        for c, shift in effects.items():
            for s in range(base_seed, base_seed + seeds):
                per = {f"t{t}": {KEY: (0.3 + shift[t] + rng.normal(0, 0.002) + rng.normal(0, 0.02, items)).tolist()}
                       for t in range(tasks)}
                cell_items[(scale, c, s)] = per
                rows.append({"scale": scale, "size": "tiny", "candidate": c, "seed": s, "parameters": 10,
                             "train_tokens": tokens, METRIC: float(np.mean([np.mean(v[KEY]) for v in per.values()]))})
    return pd.DataFrame(rows), cell_items


def test_the_point_estimate_is_ladder_agreements_and_the_interval_holds_it():
    rng = np.random.default_rng(1)
    low = {"a": [0.02] * 4, "b": [0.0] * 4, "c": [-0.02] * 4}
    cells, items = _ladder(rng, low, low)
    table = decision_table(cells, items)
    agreement = with_intervals(ladder_agreement(table, cells), cells, items, reps=200)
    row = agreement[agreement["metric"] == METRIC].iloc[0]
    assert row["sign_agreement_items"] == pytest.approx(row["sign_agreement_all"])
    assert row["acc_low"] <= row["sign_agreement_all"] <= row["acc_high"]
    assert row["sign_agreement_all"] == 1.0 and row["acc_low"] == 1.0  # large, consistent differences


def test_tasks_are_a_source_of_error():
    """One task of four carries the whole difference: resampling tasks sometimes leaves it out, and the order
    then rests on noise, so the interval widens well below the point estimate."""
    rng = np.random.default_rng(2)
    one_task = {"a": [0.08, 0, 0, 0], "b": [0.0, 0, 0, 0], "c": [-0.08, 0, 0, 0]}
    cells, items = _ladder(rng, one_task, one_task)
    ci = accuracy_intervals(cells, items, "tiny@4", ["tiny@1"], [METRIC], reps=300)
    assert ci["sign_agreement_items"].iloc[0] == 1.0 and ci["acc_low"].iloc[0] < 0.7


def test_a_fresh_replicate_is_the_last_scale_and_draws_its_own_items():
    rng = np.random.default_rng(3)
    eff = {"a": [0.02] * 4, "b": [0.0] * 4, "c": [-0.02] * 4}
    cells, items = _ladder(rng, eff, eff, top="tiny@1-fresh", fresh=True)
    cells.loc[cells["scale"] == "tiny@1-fresh", "train_tokens"] = 1  # the same FLOPs as the rung it replicates
    assert scales(cells)[-1] == "tiny@1-fresh"
    ci = accuracy_intervals(cells, items, "tiny@1-fresh", ["tiny@1"], [METRIC], reps=100)
    assert ci["sign_agreement_items"].iloc[0] == 1.0


def test_the_replicates_seeds_draws_and_items():
    assert fresh_seeds([0, 1, 2]) == [1000, 1001, 1002]
    assert fresh_eval({"seed": 0, "limit": 100}) == {"seed": 1, "exclude_seed": 0, "limit": 100}
    cells = pd.DataFrame([{"scale": "tiny@4", "candidate": "a", "seed": 1000}])
    renamed, keyed = as_fresh(cells, {("tiny@4", "a", 1000): {"t": {}}})
    assert renamed["scale"].tolist() == ["tiny@4-fresh"] and list(keyed) == [("tiny@4-fresh", "a", 1000)]


def test_the_decided_only_share_has_an_exact_interval():
    low, high = decided_interval(2, 2)  # the "2/2": 0.16 to 1.0
    assert low == pytest.approx(0.158, abs=1e-3) and high == 1.0
    assert decided_interval(0, 3)[0] == 0.0 and np.isnan(decided_interval(0, 0)[0])
