"""The decide report's headline metric (issue #43 item 2, #51 item 1): named before the run by default; with
``auto``, the metric with the largest signal-to-noise ratio at the top scale; exact ties keep DataDecide's choice, then DECISION_METRICS' order;
a set metric wins; nothing measured falls back to DataDecide's choice."""

from __future__ import annotations

import pandas as pd

from curation.reporting.decide import DEFAULT_HEADLINE, headline_metric


def _snr(rows, scale="tiny@262144"):
    return pd.DataFrame([{"scale": scale, "metric": m, "snr": v} for m, v in rows])


def test_the_metric_with_the_largest_signal_to_noise_leads():
    metric, why = headline_metric(_snr([("mc_correct_prob_per_char", 3.0), ("ref_bits_per_byte", 7.5),
                                        ("average", 0.8)]), scale="tiny@262144")
    assert metric == "ref_bits_per_byte" and "7.5" in why and "next `mc_correct_prob_per_char` at 3.0" in why


def test_only_the_top_scale_counts():
    snr = pd.concat([_snr([("average", 9.0), ("mc_margin_per_char", 1.0)], "tiny@65536"),
                     _snr([("average", 1.0), ("mc_margin_per_char", 2.0)])])
    assert headline_metric(snr, scale="tiny@262144")[0] == "mc_margin_per_char"


def test_an_exact_tie_keeps_datadecides_choice():
    assert headline_metric(_snr([("average", 2.0), (DEFAULT_HEADLINE, 2.0)]), scale="tiny@262144")[0] == \
        DEFAULT_HEADLINE
    assert headline_metric(_snr([("ref_bits_per_byte", 2.0), ("average", 2.0)]), scale="tiny@262144")[0] == \
        "average"  # DECISION_METRICS' order


def test_nothing_measured_falls_back_and_a_set_metric_wins():
    assert headline_metric(None)[0] == DEFAULT_HEADLINE
    assert headline_metric(_snr([("average", float("nan"))]), scale="tiny@262144")[0] == DEFAULT_HEADLINE
    assert headline_metric(_snr([("average", 2.0)]), "ref_bits_per_byte") == (
        "ref_bits_per_byte", "named before the run by decide.headline")


def test_the_default_headline_is_named_before_the_run():
    """Issue #51: by default the headline is not picked from the run's cells (``auto`` stays available)."""
    from curation.reporting.decide import DecideConfig

    cfg = DecideConfig(candidates={"random": {}, "b": {}})
    assert cfg.headline == DEFAULT_HEADLINE == "mc_correct_prob_per_char"
    metric, why = headline_metric(_snr([("ref_bits_per_byte", 9.0)]), cfg.headline, scale="tiny@262144")
    assert metric == DEFAULT_HEADLINE and "named before the run from the committed evidence" in why
