"""Pairwise decisions with standard errors over seeds (curation.reporting.decisions)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.reporting.decisions import against, decisions, heatmap, paper_agreement, seed_sd


def _long(data: dict[str, dict[str, list[float]]], seeds=None) -> pd.DataFrame:
    rows = []
    for corpus, metrics in data.items():
        for metric, values in metrics.items():
            for i, v in enumerate(values):
                rows.append({"corpus": corpus, "seed": (seeds or {}).get(corpus, range(len(values)))[i],
                             "metric": metric, "value": v})
    return pd.DataFrame(rows)


def test_paired_seeds_give_the_paired_standard_error_and_a_verdict():
    # Seed effects are large (+-1) but shared: the paired differences are 0.30, 0.32, 0.28.
    values = _long({"datamask": {"acc": [1.30, 2.32, 0.28]}, "random": {"acc": [1.0, 2.0, 0.0]}})
    row = decisions(values).iloc[0]
    d = np.array([0.30, 0.32, 0.28])
    assert row["paired"] and row["seeds"] == 3
    assert row["mean_diff"] == pytest.approx(d.mean())
    assert row["se"] == pytest.approx(d.std(ddof=1) / np.sqrt(3))
    assert row["decided"] and row["winner"] == "datamask" and row["agreement"] == 1.0
    assert row["verdict"].startswith("datamask beats random on acc by 0.3")


def test_unpaired_seeds_use_welch_and_noise_is_no_decision():
    values = _long({"a": {"acc": [0.50, 0.52, 0.48]}, "b": {"acc": [0.49, 0.53, 0.47, 0.51]}},
                   seeds={"a": [0, 1, 2], "b": [10, 11, 12, 13]})
    row = decisions(values).iloc[0]
    a, b = np.array([0.50, 0.52, 0.48]), np.array([0.49, 0.53, 0.47, 0.51])
    assert not row["paired"]
    assert row["se"] == pytest.approx(np.sqrt(a.var(ddof=1) / 3 + b.var(ddof=1) / 4))
    assert not row["decided"] and row["winner"] == "" and row["verdict"].startswith("no decision on acc")


def test_losses_are_lower_is_better_and_one_seed_decides_nothing():
    values = _long({"edu": {"val_loss": [3.0, 3.1, 2.9]}, "raw": {"val_loss": [3.5, 3.6, 3.4]}})
    row = decisions(values, order=["raw", "edu"]).iloc[0]
    assert (row["corpus_a"], row["corpus_b"]) == ("raw", "edu")
    assert row["decided"] and row["winner"] == "edu"  # the lower loss wins
    single = decisions(_long({"x": {"acc": [0.9]}, "y": {"acc": [0.1]}})).iloc[0]
    assert not single["decided"] and "fewer than 2 seeds" in single["verdict"]


def test_against_reference_signs_and_seed_sd():
    values = _long({"random": {"acc": [0.1, 0.2, 0.3]}, "topk": {"acc": [0.4, 0.5, 0.6]},
                    "dsir": {"acc": [0.0, 0.1, 0.2]}})
    table = decisions(values, order=["random", "topk", "dsir"])
    vs = against(table, "random").set_index("corpus")
    assert vs.loc["topk", "diff"] == pytest.approx(0.3) and vs.loc["dsir", "diff"] == pytest.approx(-0.1)
    sd = seed_sd(values).set_index("metric")
    assert sd.loc["acc", "sd_mean"] == pytest.approx(0.1) and sd.loc["acc", "seeds"] == 3
    fig = heatmap(table, "random")
    assert len(fig.axes[0].patches) == 0 or all(p.get_hatch() == "///" for p in fig.axes[0].patches)


def _protocol(means: dict[str, float], noise: float = 0.01) -> pd.DataFrame:
    """Three seeds per corpus, each the mean plus a fixed small offset per seed (paired, tiny spread)."""
    offsets = {0: -noise, 1: 0.0, 2: noise * 0.5}
    return pd.DataFrame([{"corpus": c, "seed": s, "metric": "m", "value": m + o}
                         for c, m in means.items() for s, o in offsets.items()])


def test_rank_agreement_of_the_same_ranking_and_of_its_reverse_by_hand():
    from curation.reporting.decisions import rank_agreement

    train = _protocol({"x": 1.0, "y": 2.0, "z": 3.0})
    same = rank_agreement(train, _protocol({"x": 10.0, "y": 20.0, "z": 30.0}), names=("train", "verify")).iloc[0]
    assert same["kendall_tau"] == pytest.approx(1.0) and same["sign_agreement"] == 1.0
    assert (same["pairs"], same["decided_train"], same["decided_verify"]) == (3, 3, 3)
    assert (same["decided_both"], same["agree_both"], same["disagree_both"]) == (3, 3, 0)
    reverse = rank_agreement(train, _protocol({"x": 3.0, "y": 2.0, "z": 1.0})).iloc[0]
    assert reverse["kendall_tau"] == pytest.approx(-1.0) and reverse["sign_agreement"] == 0.0
    assert (reverse["agree_both"], reverse["disagree_both"]) == (0, 3)


def test_rank_agreement_counts_a_pair_one_protocol_cannot_decide():
    from curation.reporting.decisions import rank_agreement

    train = _protocol({"x": 1.0, "y": 2.0, "z": 3.0})
    # y and z differ by far less than the seed noise in the second protocol: its pair (y, z) is undecided,
    # while x is far below both; tau over (1, 2, 3) vs (0, 5.0, 5.001) is still 1.
    noisy = pd.DataFrame([{"corpus": c, "seed": s, "metric": "m", "value": v} for c, vals in
                          {"x": (0.0, 0.0, 0.0), "y": (5.0, 4.0, 6.0), "z": (6.0, 5.0, 4.003)}.items()
                          for s, v in enumerate(vals)])
    row = rank_agreement(train, noisy).iloc[0]
    assert row["decided_first"] == 3 and row["decided_second"] == 2
    assert (row["decided_both"], row["agree_both"], row["disagree_both"]) == (2, 2, 0)
    assert row["kendall_tau"] == pytest.approx(1.0)


def test_paper_agreement_counts_decided_pairs_with_and_against_the_papers_order():
    # Paper: mask 48.1 > edu 46.8 > raw 44.9 (higher is better). Here, paired over 3 seeds: edu beats raw
    # clearly (as the paper), raw beats mask clearly (against it), mask - edu is noise (no decision).
    values = _long({"raw": {"acc": [0.50, 0.60, 0.40], "loss": [3.0, 3.1, 2.9]},
                    "edu": {"acc": [0.60, 0.71, 0.49], "loss": [2.5, 2.6, 2.4]},
                    "mask": {"acc": [0.40, 0.49, 0.31], "loss": [3.0, 3.2, 2.8]},
                    "other": {"acc": [0.9, 0.9, 0.9], "loss": [1.0, 1.0, 1.0]}})
    table = decisions(values, order=["raw", "edu", "mask", "other"])
    out = paper_agreement(table, {"raw": 44.9, "edu": 46.8, "mask": 48.1}).set_index("metric")
    acc = out.loc["acc"]
    assert acc["pairs"] == 3  # "other" has no paper row: its pairs do not count
    # raw-edu +0.10 (se ~0.003), raw-mask -0.10 (se ~0.003), edu-mask +0.20: all decided
    assert (acc["decided"], acc["agree"], acc["disagree"]) == (3, 1, 2)
    assert acc["agree_pairs"] == "edu>raw"
    assert set(acc["disagree_pairs"].split("; ")) == {"raw>mask", "edu>mask"}
    loss = out.loc["loss"]  # lower is better: edu wins both; raw - mask paired diffs 0, -0.1, +0.1 -> noise
    assert (loss["decided"], loss["agree"], loss["disagree"]) == (2, 1, 1)
    assert loss["agree_pairs"] == "edu>raw" and loss["disagree_pairs"] == "edu>mask"


def test_p_values_equal_scipys_paired_and_welch_t_tests():
    from scipy.stats import ttest_ind, ttest_rel

    a, b = [0.31, 0.35, 0.30, 0.36], [0.30, 0.31, 0.29, 0.33]
    paired = decisions(_long({"a": {"m": a}, "b": {"m": b}})).iloc[0]
    assert paired["df"] == 3 and paired["p_value"] == pytest.approx(ttest_rel(a, b).pvalue)
    welch = decisions(_long({"a": {"m": a}, "b": {"m": b[:3]}}, seeds={"a": [0, 1, 2, 3], "b": [5, 6, 7]})).iloc[0]
    assert welch["p_value"] == pytest.approx(ttest_ind(a, b[:3], equal_var=False).pvalue)
    # 3 seeds, paired differences 1.0, 0.2, 1.8: t = 2.17 cleared the old 2-SE rule, but p = 0.16 (2 df)
    d = decisions(_long({"a": {"m": [1.0, 1.2, 3.8]}, "b": {"m": [0.0, 1.0, 2.0]}})).iloc[0]
    assert d["p_value"] == pytest.approx(ttest_rel([1.0, 1.2, 3.8], [0.0, 1.0, 2.0]).pvalue)
    assert 0.05 < d["p_value"] < 0.2 and not d["decided"] and d["verdict"].startswith("no decision on m")


def test_a_decision_is_a_holm_corrected_t_test_that_keeps_its_level_at_three_seeds():
    from curation.reporting.decide_stats import holm

    # three corpora: the metric's three pairs are one family; a - b's p 0.034 alone passes, not after Holm's x3
    values = _long({"a": {"m": [1.00, 1.10, 1.22]}, "b": {"m": [0.90, 1.02, 1.07]}, "c": {"m": [0.0, 0.5, 1.0]}})
    table = decisions(values)
    assert np.allclose(table["p_holm"], holm(table["p_value"]), equal_nan=True)
    assert (table["decided"] == (table["p_holm"] < 0.05)).all()
    ab = table[(table["corpus_a"] == "a") & (table["corpus_b"] == "b")].iloc[0]
    assert ab["p_value"] < 0.05 < ab["p_holm"] and not ab["decided"]
    # under the null (two corpora, 3 paired seeds, normal noise) it decides about 5% of pairs; 2 SE decided 18%
    rng = np.random.default_rng(0)
    null = [decisions(_long({"x": {"m": list(rng.normal(size=3))}, "y": {"m": list(rng.normal(size=3))}}))
            .iloc[0] for _ in range(2000)]
    assert 0.035 < np.mean([r["decided"] for r in null]) < 0.065
    assert 0.15 < np.mean([abs(r["mean_diff"]) > 2 * r["se"] for r in null]) < 0.21
