"""Report builders of the Meta-rater and Ultra-FineWeb artefacts, on hand-made run tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.reporting.registry import build_report, registry


def _run(run_id: str, start: int, **metrics: float) -> dict:
    return {"run_id": run_id, "start_time": pd.Timestamp(start, unit="s"),
            **{f"metrics.{k}": v for k, v in metrics.items()}}


def _metarater_tables() -> dict[str, pd.DataFrame]:
    summary = pd.DataFrame({"method": ["metarater", "uniform", "rater:edu", "random"],
                            "val_loss_mean": [6.40, 6.50, 6.55, 6.70], "val_loss_std": [0.01, 0.02, 0.0, 0.03],
                            "seeds": [3, 3, 1, 3]})
    runs = pd.DataFrame({"method": ["metarater"] * 3, "seed": [0, 1, 2], "val_loss": [6.39, 6.40, 6.41],
                         "selection_docs": [2398] * 3})
    weights = pd.DataFrame({"rank": [1, 2, 3, 4], "rater": ["edu", "doc_word_count", "fasttext_dclm",
                                                             "doc_mean_word_length"],
                            "weight_pct": [40.0, 30.0, 20.0, 10.0]})
    curve = pd.DataFrame({"num_proxies": [8, 16, 32], "val_loss_mean": [6.6, 6.5, 6.4],
                          "val_loss_std": [0.0, 0.0, 0.0], "seeds": [1, 1, 1], "spearman_test": [0.2, 0.4, 0.6]})
    return {"metarater_comparison_summary_table": summary, "metarater_comparisons_table": runs,
            "metarater_weights_table": weights, "metarater_num_proxies_table": curve}


def test_plugins_are_registered():
    assert {"metarater_table1", "metarater_table10_weights", "metarater_fig2_num_proxies",
            "ufw_table8_verification_ratio", "table2_tiny"} <= set(registry())


def test_metarater_table1_ranks_methods_and_states_the_gap_in_standard_errors():
    runs = pd.DataFrame([_run("old", 1), _run("new", 2, gap_uniform_minus_metarater=0.10,
                                               gap_uniform_minus_metarater_in_se=5.8,
                                               regression_spearman_test=0.7, regression_spearman_cv=0.6,
                                               regression_proxies=32,
                                               diff_uniform_minus_metarater_test_loss_mean=0.035,
                                               diff_uniform_minus_metarater_test_loss_se=0.026)])
    report = build_report("metarater_table1", runs, {}, {"new": _metarater_tables(), "old": {}})
    assert list(report.table["method"]) == ["metarater", "uniform", "rater:edu", "random"]
    assert list(report.table["kind"]) == ["Meta-rater (w*)", "combination", "single rater", "combination"]
    text = " ".join(report.notes)
    assert "uniform - metarater = +0.1000" in text and "5.8 standard errors" in text
    # issue #27: the judge set's paired difference is reported beside the D_v gap
    assert "Judge set (held out, never fitted to): uniform - metarater = +0.0350 +- 0.0260" in text and "1.3 SE" in text
    assert "LightGBM regressor: Spearman rho 0.700" in text and "2398 documents" in text
    assert report.paper is not None and "Meta-rater All (25)" in set(report.paper["method"])


def test_metarater_table10_lines_up_the_raters_the_paper_also_weighs():
    report = build_report("metarater_table10_weights", pd.DataFrame([_run("r", 1)]), {},
                          {"r": _metarater_tables()})
    table = report.table.set_index("rater")
    assert table.loc["edu", "paper_weight_pct"] == pytest.approx(4.93)  # Fineweb-edu
    assert table.loc["doc_mean_word_length", "paper_rank_of_25"] == 24
    assert np.isnan(table.loc["fasttext_dclm", "paper_weight_pct"])  # no counterpart in the paper
    # ours: edu > doc_word_count > doc_mean_word_length; paper: 4.93 > 4.23 > 0.65 -> rank correlation 1
    assert any("over the 3 raters both compute: 1.00" in n for n in report.notes)


def test_metarater_fig2_reports_the_curve_and_a_missing_table_is_a_clear_error():
    report = build_report("metarater_fig2_num_proxies", pd.DataFrame([_run("r", 1)]), {}, {"r": _metarater_tables()})
    assert list(report.table["num_proxies"]) == [8, 16, 32]
    assert any("lower with more proxies, beyond the seed noise" in n for n in report.notes)
    with pytest.raises(ValueError, match="metarater_num_proxies_table"):
        build_report("metarater_fig2_num_proxies", pd.DataFrame([_run("r", 1)]), {}, {"r": {}})


def _verification_table(ratio: float, raw: float, selection: float) -> pd.DataFrame:
    rows = [{"ratio": np.nan, "dataset": "base", "mmlu": 30.0, "average": 30.0},
            {"ratio": ratio, "dataset": "default_only", "mmlu": 31.0, "average": 31.0},
            {"ratio": ratio, "dataset": "raw", "mmlu": raw, "average": raw},
            {"ratio": ratio, "dataset": "selection", "mmlu": selection, "average": selection}]
    table = pd.DataFrame(rows)
    for column in ("mmlu", "average"):
        table[f"delta_{column}"] = table[column] - 31.0
    return table


def test_ufw_table8_stacks_the_sweep_jobs_and_compares_selection_with_raw():
    runs = pd.DataFrame([_run("a", 1), _run("b", 2)]).assign(**{"params.verification.limit": "100"})
    tables = {"a": {"verification_table": _verification_table(0.3, 32.0, 33.5)},
              "b": {"verification_table": _verification_table(0.1, 31.0, 30.0)}}
    report = build_report("ufw_table8_verification_ratio", runs, {}, tables)
    assert list(report.table["dataset"]) == ["base", "default_only", "raw", "selection",
                                             "default_only", "raw", "selection"]
    assert list(report.table["ratio"].iloc[1:]) == [0.1] * 3 + [0.3] * 3
    text = " ".join(report.notes)
    assert "r=0.10: -1.00" in text and "r=0.30: +1.50" in text
    assert "sampling error is about 5.0 points" in text  # 100 * sqrt(0.25 / 100), one task
