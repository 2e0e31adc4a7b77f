"""Every standard error a decision or verdict rests on, computed by hand (issue #38).

Each test writes the formula out on small numbers whose answer is known, so replacing ``sd / sqrt(n)`` by
the plain sd (or ``ddof=0``, or Welch by a pooled variance) fails here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from curation.evaluation.items import item_se, items_for, paired_item_se
from curation.metarater.compare import gaps_to_metarater, paired_differences, summarize
from curation.reporting.decide import decision_table, size_agreement
from curation.reporting.decisions import decisions, p_value


def test_metarater_paired_difference_se_is_sd_over_root_seeds():
    # uniform - metarater on seeds 0, 1, 2: 0.03, 0.01, 0.05 -> mean 0.03, sd 0.02, se 0.02 / sqrt(3)
    table = pd.DataFrame({"method": ["metarater"] * 3 + ["uniform"] * 3, "seed": [0, 1, 2] * 2,
                          "val_loss": [3.00, 3.10, 2.90, 3.03, 3.11, 2.95]})
    row = paired_differences(table, ["val_loss"]).iloc[0]
    assert row["diff_mean"] == pytest.approx(0.03, abs=1e-12)
    assert row["diff_se"] == pytest.approx(0.02 / math.sqrt(3), rel=1e-9)
    assert row["seeds"] == 3


def test_metarater_gap_se_is_welch_of_the_two_means():
    table = pd.DataFrame({"method": ["metarater"] * 3 + ["uniform"] * 3, "seed": [0, 1, 2] * 2,
                          "val_loss": [3.0, 3.2, 3.4, 3.5, 3.6, 3.7], "test_loss": [1.0, 2.0, 4.0, 1.0, 1.0, 1.0]})
    summary = summarize(table).set_index("method")
    # sd of (1, 2, 4): mean 7/3, squares (16 + 1 + 25) / 9 / 2 = 7/3 -> sd sqrt(7/3); se sqrt(7/3) / sqrt(3)
    assert summary.loc["metarater", "test_loss_se"] == pytest.approx(math.sqrt(7 / 3) / math.sqrt(3), rel=1e-9)
    gaps = gaps_to_metarater(summarize(table))
    # sd metarater 0.2, sd uniform 0.1: se sqrt(0.04 / 3 + 0.01 / 3); gap 3.6 - 3.2 = 0.4
    assert gaps["gap_uniform_minus_metarater"] == pytest.approx(0.4, abs=1e-12)
    assert gaps["gap_uniform_minus_metarater_in_se"] == pytest.approx(0.4 / math.sqrt(0.05 / 3), rel=1e-9)


def _long(values: dict[str, list[float]], metric: str = "m") -> pd.DataFrame:
    return pd.DataFrame([{"corpus": c, "seed": s, "metric": metric, "value": v}
                         for c, vs in values.items() for s, v in enumerate(vs)])


def test_decision_se_paired_by_seed_and_its_p_value():
    # a - b per seed: 0.02, 0.04, 0.06 -> mean 0.04, sd 0.02, se 0.02 / sqrt(3) = 0.011547, t = 3.4641
    table = decisions(_long({"a": [1.02, 1.14, 1.06], "b": [1.00, 1.10, 1.00]}))
    row = table.iloc[0]
    se = 0.02 / math.sqrt(3)
    assert row["paired"] and row["mean_diff"] == pytest.approx(0.04, abs=1e-12)
    assert row["se"] == pytest.approx(se, rel=1e-9)
    t = 0.04 / se
    # Student t with 2 df: P(|T| > t) = 1 - t / sqrt(2 + t^2)
    assert row["p_value"] == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)
    assert not row["decided"]  # 3.46 SE, but p = 0.074 with 2 df: not below 0.05


def test_decision_se_welch_when_seeds_differ():
    table = decisions(_long({"a": [1.0, 2.0, 3.0], "b": [0.0, 1.0]}))
    row = table.iloc[0]
    # var a = 1 (n 3), var b = 0.5 (n 2): se sqrt(1/3 + 0.5/2); df (1/3 + 1/4)^2 / ((1/3)^2 / 2 + (1/4)^2 / 1)
    va, vb = 1 / 3, 0.25
    assert not row["paired"]
    assert row["se"] == pytest.approx(math.sqrt(va + vb), rel=1e-9)
    assert row["df"] == pytest.approx((va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 1), rel=1e-9)
    assert p_value(1.0, 0.5, 2.0) == pytest.approx(1 - 2 / math.sqrt(2 + 4), rel=1e-9)


def test_decide_table_names_p_and_keeps_each_side_seed_sd():
    cells = pd.DataFrame({"size": "tiny", "candidate": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2] * 2,
                          "mc_correct_prob_per_char": [0.12, 0.14, 0.16, 0.10, 0.11, 0.12]})
    row = decision_table(cells).iloc[0]
    assert {"mean_diff", "se_seed", "se_item", "se", "p", "p_holm", "decided"} <= set(row.index)
    # a - b: 0.02, 0.03, 0.04 -> mean 0.03, sd 0.01, seed part of the se 0.01 / sqrt(3)
    assert row["se_seed"] == pytest.approx(0.01 / math.sqrt(3), rel=1e-6)
    assert row["sd_a"] == pytest.approx(0.02, rel=1e-9) and row["sd_b"] == pytest.approx(0.01, rel=1e-9)
    # no per-item values: the item part is unknown, so the full se is too and nothing is decided (issue #43)
    assert math.isnan(row["se"]) and not row["decided"]


def test_size_agreement_counts_signs_of_small_decisions_at_the_large_size():
    rows = []
    # metric m: (a, b) decided at small with a ahead, same sign at large; (a, c) decided, sign flips; (b, c) not
    for size, diffs, decided in (("tiny", [0.3, 0.2, 0.1], [True, True, False]),
                                 ("small", [0.1, -0.2, 0.1], [False, True, True])):
        for (a, b), d, dec in zip((("a", "b"), ("a", "c"), ("b", "c")), diffs, decided):
            rows.append({"size": size, "corpus_a": a, "corpus_b": b, "metric": "m", "mean_diff": d, "decided": dec})
    agreement = size_agreement(pd.DataFrame(rows), "tiny", "small").iloc[0]
    assert agreement["decided_small"] == 2 and agreement["sign_holds"] == 1 and agreement["share_holds"] == 0.5
    assert agreement["decided_both"] == 1 and agreement["agree_both"] == 0
    assert agreement["sign_agreement_all"] == pytest.approx(2 / 3)


def test_item_standard_errors_of_a_cell_and_of_a_paired_difference():
    a = {"arc_easy": {"correct_prob_per_char": [0.1, 0.2, 0.3, 0.4]},
         "piqa": {"correct_prob_per_char": [0.5, 0.5, 0.7, 0.7]}}
    b = {"arc_easy": {"correct_prob_per_char": [0.1, 0.1, 0.2, 0.4]},
         "piqa": {"correct_prob_per_char": [0.4, 0.5, 0.6, 0.7]}}
    # mean over 2 tasks: w = 1/2; var(arc a) = 0.016667, var(piqa a) = 0.013333; n = 4
    var_a = np.var([0.1, 0.2, 0.3, 0.4], ddof=1), np.var([0.5, 0.5, 0.7, 0.7], ddof=1)
    assert item_se(a, "mc_correct_prob_per_char") == pytest.approx(math.sqrt(sum(0.25 * v / 4 for v in var_a)))
    var_d = np.var([0.0, 0.1, 0.1, 0.0], ddof=1), np.var([0.1, 0.0, 0.1, 0.0], ddof=1)
    assert paired_item_se(a, b, "mc_correct_prob_per_char") == pytest.approx(
        math.sqrt(sum(0.25 * v / 4 for v in var_d)))
    assert items_for(0.02, 100, 0.01) == 400


def test_reference_loss_item_se_is_the_delta_method_of_a_ratio():
    bits, size = np.array([10.0, 30.0, 20.0]), np.array([10.0, 20.0, 30.0])
    items = {"sciq": {"ref_bits": list(bits), "ref_bytes": list(size)}}
    r = bits.sum() / size.sum()  # 1.0
    z = (bits - r * size) / size.mean()  # 0, 0.5, -0.5
    assert item_se(items, "ref_bits_per_byte") == pytest.approx(math.sqrt(np.var(z, ddof=1) / 3))
    assert item_se(items, "ref_bits_per_byte") == pytest.approx(math.sqrt(0.25 / 3))
