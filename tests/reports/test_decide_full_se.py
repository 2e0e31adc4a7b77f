"""A decision's full standard error and its test (issue #43), by hand.

Seeds and evaluation items both enter the SE; the item part is computed on each item's difference averaged over
the paired seeds; the test is Cochran-Cox's on the two parts' degrees of freedom; ``decided`` needs the
Holm-corrected p below 0.05. Each part is written out on numbers small enough to do by hand, and a simulation
of null differences checks the test's false-positive rate at 3 seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as student_t

from curation.evaluation.items import metric_value
from curation.reporting.decide import DecideConfig, build_report, decision_table
from curation.reporting.decide_stats import (
    cochran_cox_p,
    critical_value,
    full_decisions,
    holm,
    item_variance,
    signal_to_noise,
)
from curation.reporting.decide_text import recommendation

METRIC = "mc_correct_prob_per_char"
KEY = "correct_prob_per_char"


def _items(per_task: dict[str, list[float]]) -> dict:
    return {task: {KEY: values} for task, values in per_task.items()}


def _cells(values: dict[str, list[float]], scale: str = "tiny@1") -> pd.DataFrame:
    return pd.DataFrame([{"scale": scale, "size": "tiny", "candidate": c, "seed": s, METRIC: v}
                         for c, vs in values.items() for s, v in enumerate(vs)])


def test_item_part_is_the_variance_of_each_items_seed_averaged_difference():
    # two seeds, one task of 4 items; a - b per item: seed 0 (1, 2, 3, 6), seed 1 (3, 2, 1, 2) -> averaged over
    # seeds (2, 2, 2, 4): mean 2.5, var (0.25 * 3 + 2.25) / 3 = 1.0 -> item variance 1.0 / 4 items = 0.25
    a = [_items({"t": [1.0, 2.0, 3.0, 6.0]}), _items({"t": [3.0, 2.0, 1.0, 2.0]})]
    b = [_items({"t": [0.0, 0.0, 0.0, 0.0]}), _items({"t": [0.0, 0.0, 0.0, 0.0]})]
    var, n_items, n_tasks = item_variance(a, b, METRIC)
    assert var == pytest.approx(0.25, rel=1e-12) and (n_items, n_tasks) == (4, 1)
    # two tasks: weights 1/2 each -> (1/4) var_1 / n_1 + (1/4) var_2 / n_2
    a2 = [_items({"t": [1.0, 3.0], "u": [0.0, 4.0, 8.0]})]
    b2 = [_items({"t": [0.0, 0.0], "u": [0.0, 0.0, 0.0]})]
    var2, _, _ = item_variance(a2, b2, METRIC)
    assert var2 == pytest.approx(0.25 * 2.0 / 2 + 0.25 * 16.0 / 3, rel=1e-12)


def test_full_se_is_the_seed_part_plus_the_item_part_and_p_is_cochran_cox():
    # per seed, cell value = the item mean of its one task; a - b: 0.02, 0.04, 0.06
    items, values = {}, {"a": [], "b": []}
    item_diffs = {0: [0.00, 0.04], 1: [0.02, 0.06], 2: [0.04, 0.08]}
    for s, diffs in item_diffs.items():
        items[("tiny@1", "a", s)] = _items({"t": [0.5 + d for d in diffs]})
        items[("tiny@1", "b", s)] = _items({"t": [0.5, 0.5]})
        values["a"].append(0.5 + float(np.mean(diffs)))
        values["b"].append(0.5)
    row = full_decisions(_cells(values), items, [METRIC]).iloc[0]
    v_seed = 0.02 ** 2 / 3  # sd of (0.02, 0.04, 0.06) is 0.02
    v_item = 0.04 ** 2 / 2 / 2  # seed-averaged item differences (0.02, 0.06): var 0.0008 / 2 items
    assert row["mean_diff"] == pytest.approx(0.04, rel=1e-12)
    assert row["se_seed"] == pytest.approx(math.sqrt(v_seed), rel=1e-9)
    assert row["se_item"] == pytest.approx(math.sqrt(v_item), rel=1e-9)
    assert row["se"] == pytest.approx(math.sqrt(v_seed + v_item), rel=1e-9)
    # Cochran-Cox: at alpha = p the weighted critical value equals the t statistic
    t = 0.04 / math.sqrt(v_seed + v_item)
    crit = (v_seed * student_t.isf(row["p"] / 2, 2) + v_item * student_t.isf(row["p"] / 2, 1)) / (v_seed + v_item)
    assert crit == pytest.approx(t, rel=1e-6)
    assert row["df_seed"] == 2 and row["items"] == 2


def test_p_inverts_the_critical_value():
    for v_seed, v_item in ((1e-6, 1e-6), (4e-6, 1e-7), (1e-8, 3e-6)):
        p = cochran_cox_p(0.004, v_seed, v_item, 2.0, 990.0)
        t = 0.004 / math.sqrt(v_seed + v_item)
        assert critical_value(p, v_seed, v_item, 2.0, 990.0) == pytest.approx(t, rel=1e-6)


def test_without_an_item_part_the_test_is_the_paired_t_test():
    p = cochran_cox_p(0.04, 0.02 ** 2 / 3, 0.0, 2.0, 100.0)
    t = 0.04 / (0.02 / math.sqrt(3))
    assert p == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-6)  # Student t, 2 df, two-sided
    assert critical_value(0.05, 1.0, 0.0, 2.0, 100.0) == pytest.approx(student_t.isf(0.025, 2))


def test_dropping_the_item_part_would_decide_a_pair_the_items_leave_open():
    # the seeds agree closely (seed SE 0.0001) but the items disagree (item differences spread over +-0.05)
    rng = np.random.default_rng(3)
    per_item = rng.normal(0.0, 0.05, 200)
    per_item += 0.002 - per_item.mean()  # a true-looking difference of 0.002 on these items
    items, values = {}, {"a": [], "b": []}
    for s, shift in enumerate((-0.0001, 0.0, 0.0001)):
        items[("tiny@1", "a", s)] = _items({"t": list(0.5 + per_item + shift)})
        items[("tiny@1", "b", s)] = _items({"t": [0.5] * 200})
        values["a"].append(0.5 + 0.002 + shift)
        values["b"].append(0.5)
    row = full_decisions(_cells(values), items, [METRIC]).iloc[0]
    seed_only_t = row["mean_diff"] / row["se_seed"]
    assert seed_only_t > 15  # the seed-only rule of issue #38 decided this at 2 SE
    assert row["se_item"] > 10 * row["se_seed"] and not row["decided"] and row["p"] > 0.3


def test_holm_by_hand():
    # p = (0.01, 0.04, 0.03) -> sorted 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 -> max(0.06, 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])
    out = holm([0.2, float("nan"), 0.01])
    assert out[0] == pytest.approx(0.2) and math.isnan(out[1]) and out[2] == pytest.approx(0.02)


def test_decided_needs_the_holm_corrected_p():
    items, values = {}, {c: [] for c in "abc"}
    rng = np.random.default_rng(0)
    base = rng.normal(0.5, 0.1, 100)
    for s in range(3):
        for c, shift in (("a", 0.01), ("b", 0.0), ("c", 0.0)):
            v = base + shift + rng.normal(0, 0.002, 100)
            items[("tiny@1", c, s)] = _items({"t": list(v)})
            values[c].append(float(v.mean()))
    table = full_decisions(_cells(values), items, [METRIC])
    assert (table["decided"] == (table["p_holm"] < 0.05)).all()
    assert table["p_holm"].tolist() == pytest.approx(holm(table["p"]).tolist())


def test_the_test_keeps_its_false_positive_rate_at_three_seeds():
    """Null differences with seed noise, item noise and their interaction, 3 seeds x 10 tasks x 100 items: the
    share rejected at alpha 0.05 stays <= 0.05 + 3 Monte-Carlo SE at every seed/item ratio (Welch-Satterthwaite's
    df reaches 0.07-0.08 here where the two parts are alike)."""
    rng = np.random.default_rng(7)
    reps, n, tasks, items = 1500, 3, 10, 100
    for seed_sd in (0.0, 0.05, 0.1, 0.3, 1.0):
        seed = rng.normal(0, seed_sd, (reps, n, 1, 1))
        item = rng.normal(0, 1.0, (reps, 1, tasks, items))
        inter = rng.normal(0, 0.5, (reps, n, tasks, items))
        d = seed + item + inter
        cell = d.mean(axis=(2, 3))
        v_seed = cell.var(axis=1, ddof=1) / n
        xbar = d.mean(axis=1)
        v_item = (xbar.var(axis=2, ddof=1) / items).sum(axis=1) / tasks ** 2
        t = np.abs(cell.mean(axis=1)) / np.sqrt(v_seed + v_item)
        # p < 0.05 exactly when t exceeds the critical value at 0.05 (cochran_cox_p inverts critical_value)
        rejected = sum(tt > critical_value(0.05, vs, vi, n - 1, tasks * items - tasks)
                       for tt, vs, vi in zip(t, v_seed, v_item))
        assert rejected / reps <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps), (seed_sd, rejected / reps)


def test_a_metric_recomputed_from_items_is_the_task_mean_of_item_means():
    items = {"t": {KEY: [0.1, 0.3]}, "u": {KEY: [0.2, 0.2, 0.5]}}
    assert metric_value(items, METRIC) == pytest.approx((0.2 + 0.3) / 2)
    assert metric_value(items, METRIC, tasks=["u"]) == pytest.approx(0.3)


def _world(effects: dict[str, float], noise: float, seeds: int = 3, n: int = 200, seed: int = 0):
    """Cells and items of candidates whose true effects on the per-item values are ``effects``."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.15, 0.03, n)
    cells, items = [], {}
    for c, effect in effects.items():
        for s in range(seeds):
            v = base + effect + rng.normal(0, noise, n)
            ref = rng.uniform(40, 60, n)
            items[("tiny@262144", c, s)] = {"arc_easy": {KEY: list(v), "ref_bits": list(ref - 100 * effect * 0),
                                                         "ref_bytes": [20.0] * n}}
            cells.append({"scale": "tiny@262144", "size": "tiny", "candidate": c, "seed": s, METRIC: float(v.mean()),
                          "ref_bits_per_byte": float(np.sum(ref) / (20.0 * n)), "parameters": 3e6,
                          "train_tokens": 262144, "budget_tokens": 1e6, "corpus_digest": c})
    return pd.DataFrame(cells), items


def test_no_decided_pair_names_no_winner():
    cells, items = _world({"random": 0.0, "topk": 0.0, "edu": 0.0}, noise=0.02)
    report = build_report(cells, items, DecideConfig(candidates={"random": {}, "topk": {}, "edu": {}}), 200)
    rows = report.table[report.table["metric"] == METRIC]
    assert not rows["decided"].any()
    assert "**Answer: no winner**" in report.text and "Recommendation" not in report.text
    assert "What would decide" in report.text
    # what was measured (no pair separated at these seeds), not a claim that was not tested (that they are equal)
    answer = next(line for line in report.text.splitlines() if line.startswith("**Answer: no winner**"))
    assert "no pair of candidates is separated on `" in answer and "at tiny@262144 with 3 seeds: " in answer
    assert "every difference is one that seed and item noise can produce at this many seeds" in answer
    assert "error bars" not in answer  # read as +-1 SE: a 2-SE difference at 3 seeds is still not decided
    assert ("This is not evidence that they are equal: no equivalence test was run (`decide.equivalence` is "
            "unset), and a real difference of the size seen is not ruled out.") in answer
    for claim in ("equally good", "train equally", "as good as", "the same quality", "no difference"):
        assert claim not in report.text


def test_an_undecided_result_names_only_the_pairs_an_equivalence_margin_shows_equal():
    cells, items = _world({"random": 0.0, "topk": 0.0, "edu": 0.0}, noise=0.02)
    config = {"random": {}, "topk": {}, "edu": {}}
    wide = build_report(cells, items, DecideConfig(candidates=config, equivalence=1.0), 200).text
    assert "no pair of candidates is separated" in wide and "This is not evidence that they are equal: only the " \
        "equivalence test can show that, and it does for `random` and `topk`; `random` and `edu`; `topk` and `edu` " \
        "(90% interval inside ±1, `decide.equivalence`); no other pair is shown equal." in wide
    narrow = build_report(cells, items, DecideConfig(candidates=config, equivalence=1e-9), 200).text
    assert ("no pair's 90% interval lies inside the equivalence margin ±1e-09 (`decide.equivalence`), so none is "
            "shown equal either.") in narrow
    for text in (wide, narrow):
        assert "equally good" not in text and "no equivalence test was run" not in text


def test_an_undecided_result_says_the_seeds_each_pair_had_and_unknown_errors_are_not_error_bars():
    cells = _cells({"a": [0.20, 0.21, 0.23], "b": [0.20, 0.22, 0.21], "c": [0.21, 0.20, 0.215]}, scale="tiny@262144")
    base = {"scale": "tiny@262144", "metric": METRIC, "mean_a": 0.21, "mean_b": 0.21, "mean_diff": 0.001,
            "se_seed": 0.01, "se_item": 0.002, "se": 0.0102, "items": 1000, "p": 0.9, "p_holm": 0.9,
            "decided": False, "winner": ""}
    table = pd.DataFrame([{**base, "corpus_a": "a", "corpus_b": "b", "seeds": 5},
                          {**base, "corpus_a": "a", "corpus_b": "c", "seeds": 3},
                          {**base, "corpus_a": "b", "corpus_b": "c", "seeds": 3}])
    text = recommendation(cells, table, METRIC, "set", scale="tiny@262144")
    assert f"no pair of candidates is separated on `{METRIC}` at tiny@262144 with 3 to 5 seeds (pairs differ): " in text
    unknown = recommendation(cells, table.assign(se_item=np.nan, se=np.nan, p=np.nan, p_holm=np.nan), METRIC, "set",
                             scale="tiny@262144")
    assert (f"no pair of candidates could be decided on `{METRIC}` at tiny@262144 with 3 to 5 seeds (pairs differ): "
            "the run kept no item values, so the item part of each difference's error is unknown.") in unknown
    assert "error bars" not in unknown and "equally good" not in unknown
    # with part of the error unknown, what would decide is not sized (it read "neither up to 64 seeds nor ...")
    assert ("What would decide `a` vs `b`: not estimated, since part of the error is unknown (no item values were "
            "recorded: a run that keeps them sizes it).") in unknown and "64 seeds" not in unknown and "items per task" not in unknown


def test_one_wording_of_a_verdict_for_the_fixed_and_the_sequential_design():
    from curation.reporting.decide_sequential import relabel
    from curation.reporting.decide_stats import verdict

    won = pd.Series({"corpus_a": "a", "corpus_b": "b", "mean_diff": -0.0123456, "se": 0.00345, "p": 0.00123,
                     "p_holm": 0.00246, "decided": True, "winner": "b"})
    lost = won.copy()
    lost["decided"], lost["winner"], lost["p_holm"] = False, "", 0.31
    assert verdict(won, METRIC, 0.05) == f"b beats a on {METRIC} by 0.01235 ± 0.0034 (p = 0.0012, Holm 0.0025)"
    assert verdict(lost, METRIC, 0.05) == f"no decision on {METRIC}: -0.01235 ± 0.0034 (Holm p = 0.31 >= 0.05)"
    unknown = won.copy()
    unknown["se"] = np.nan
    assert verdict(unknown, METRIC) == (f"no decision on {METRIC}: no item values (the item part of the error is "
                                        "unknown)")
    rows = pd.DataFrame([{**won.to_dict(), "metric": METRIC, "looks": 3, "decided_at_seeds": 5, "family": "all"},
                         {**won.to_dict(), "metric": METRIC, "looks": 1, "decided_at_seeds": 3, "family": METRIC},
                         {**lost.to_dict(), "metric": METRIC, "looks": 2, "decided_at_seeds": 0, "family": METRIC}])
    assert relabel(rows)["verdict"].tolist() == [
        f"b beats a on {METRIC} by 0.01235 ± 0.0034 (p = 0.0012; 3 looks, decided at 5 seeds, Holm 0.0025 over "
        "every metric's pairs)",
        f"b beats a on {METRIC} by 0.01235 ± 0.0034 (p = 0.0012; decided at 3 seeds, Holm 0.0025 over its metric's "
        "pairs)",
        f"no decision on {METRIC}: -0.01235 ± 0.0034 (2 looks, Holm p = 0.31 >= 0.05 over its metric's pairs)"]


def test_a_candidate_decided_against_every_other_is_named():
    cells, items = _world({"random": 0.0, "topk": 0.01, "edu": 0.03}, noise=0.001)
    report = build_report(cells, items, DecideConfig(candidates={"random": {}, "topk": {}, "edu": {}}), 200,
                          )
    assert "**Answer: `edu`**" in report.text


def test_an_exact_tie_is_no_winner_not_the_first_name():
    cells, items = _world({"b": 0.0, "a": 0.0}, noise=0.0)
    cells[METRIC] = 0.2  # identical means
    text = recommendation(cells, full_decisions(cells, items, [METRIC]), METRIC, "set", scale="tiny@262144",
                          items=items)
    assert "tie exactly" in text and "**Answer: no winner**" in text


def test_metric_disagreement_is_the_first_paragraph():
    cells = _cells({"a": [0.20, 0.21, 0.22], "b": [0.10, 0.11, 0.12]}, scale="tiny@262144")
    cells["ref_bits_per_byte"] = [2.9, 2.91, 2.92, 2.5, 2.51, 2.52]  # lower is better: b wins here
    table = pd.DataFrame([
        {"scale": "tiny@262144", "corpus_a": "a", "corpus_b": "b", "metric": METRIC, "mean_a": 0.21, "mean_b": 0.11,
         "mean_diff": 0.1, "se_seed": 0.001, "se_item": 0.002, "se": 0.00224, "seeds": 3, "p": 1e-4, "p_holm": 1e-4,
         "decided": True, "winner": "a"},
        {"scale": "tiny@262144", "corpus_a": "a", "corpus_b": "b", "metric": "ref_bits_per_byte", "mean_a": 2.91,
         "mean_b": 2.51, "mean_diff": 0.4, "se_seed": 0.001, "se_item": 0.01, "se": 0.01, "seeds": 3, "p": 1e-4,
         "p_holm": 1e-4, "decided": True, "winner": "b"}])
    text = recommendation(cells, table, METRIC, "set by decide.headline", scale="tiny@262144")
    body = [line for line in text.splitlines()[1:] if line.strip()]
    assert body[0].startswith("**Metrics disagree at tiny@262144** (each metric Holm-corrected on its own; only")
    assert "`mc_correct_prob_per_char` says `a`" in text and "`ref_bits_per_byte` says `b`" in text
    assert text.index("Metrics disagree") < text.index("Headline metric")
    assert "bits per byte" in text  # what the metric measures is said


def test_signal_to_noise_is_the_candidates_spread_over_the_error_of_a_difference():
    table = pd.DataFrame([
        {"scale": "s", "metric": "m", "corpus_a": "a", "corpus_b": "b", "mean_a": 1.0, "mean_b": 2.0, "se": 0.2},
        {"scale": "s", "metric": "m", "corpus_a": "a", "corpus_b": "c", "mean_a": 1.0, "mean_b": 3.0, "se": 0.2},
        {"scale": "s", "metric": "m", "corpus_a": "b", "corpus_b": "c", "mean_a": 2.0, "mean_b": 3.0, "se": 0.2}])
    row = signal_to_noise(table).iloc[0]
    assert row["signal"] == pytest.approx(1.0) and row["noise"] == pytest.approx(0.2 / math.sqrt(2))
    assert row["snr"] == pytest.approx(1.0 / (0.2 / math.sqrt(2)))


def test_the_decisions_table_without_items_decides_nothing():
    table = decision_table(_cells({"a": [0.12, 0.14, 0.16], "b": [0.10, 0.11, 0.12]}))
    assert table["se_item"].isna().all() and not table["decided"].any()
    assert table["se_seed"].iloc[0] == pytest.approx(0.01 / math.sqrt(3), rel=1e-6)


def test_what_would_decide_is_the_first_seed_count_whose_test_clears_the_holm_level_with_power():
    from curation.reporting.decide_stats import seeds_and_items_needed

    diff, se_seed, se_item = 0.0277, 0.0062, 0.0019
    seeds, items = seeds_and_items_needed(diff, se_seed, se_item, 3, 100, family=6, total_items=1000)
    assert seeds > 3 and items == -1  # the seed part with 2 df is the obstacle: more items alone never decide

    def clears(n):
        vs, vi = se_seed ** 2 * 3 / n, se_item ** 2
        return diff / math.sqrt(vs + vi) >= critical_value(0.05 / 6, vs, vi, n - 1, 999) + 0.84

    assert clears(seeds) and not clears(seeds - 1)
    # an item-dominated difference: more items decide, more seeds alone do not
    seeds2, items2 = seeds_and_items_needed(0.002, 0.0001, 0.0008, 3, 100, family=6, total_items=1000)
    assert seeds2 == -1 and items2 > 100
