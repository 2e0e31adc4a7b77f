"""The decide report's headline metric (issue #38 item 4): the metric whose small-size decisions hold best at the
larger size; ties keep DataDecide's choice; one size falls back to it."""

from __future__ import annotations

import pandas as pd

from curation.reporting.decide import DEFAULT_HEADLINE, headline_metric


def _agreement(rows):
    return pd.DataFrame([{"metric": m, "decided_small": d, "sign_holds": h, "share_holds": h / d if d else float("nan"),
                          "small": "tiny", "large": "small"} for m, d, h in rows])


def test_the_metric_whose_decisions_hold_best_leads():
    metric, why = headline_metric(_agreement([("mc_correct_prob_per_char", 3, 2), ("ref_bits_per_byte", 3, 3),
                                              ("average", 1, 0)]))
    assert metric == "ref_bits_per_byte" and "3 of 3 keep their sign" in why and "tied" not in why


def test_more_decided_pairs_break_an_equal_share():
    metric, _ = headline_metric(_agreement([("ref_bits_per_byte", 1, 1), ("mc_margin_per_char", 3, 3)]))
    assert metric == "mc_margin_per_char"


def test_an_exact_tie_keeps_datadecides_choice_and_says_so():
    metric, why = headline_metric(_agreement([("average", 2, 2), (DEFAULT_HEADLINE, 2, 2), ("ref_bits_per_byte", 2, 1)]))
    assert metric == DEFAULT_HEADLINE and "tied with `average`" in why and "DataDecide's choice" in why
    metric, why = headline_metric(_agreement([("ref_bits_per_byte", 2, 2), ("average", 2, 2)]))
    assert metric == "average" and "tied with `ref_bits_per_byte`" in why  # DECISION_METRICS' order


def test_one_size_or_nothing_decided_falls_back_and_a_set_metric_wins():
    assert headline_metric(None)[0] == DEFAULT_HEADLINE
    assert headline_metric(_agreement([("average", 0, 0)]))[0] == DEFAULT_HEADLINE
    assert headline_metric(_agreement([("average", 2, 2)]), "ref_bits_per_byte") == (
        "ref_bits_per_byte", "set by decide.headline")
