"""table2_tiny: the experiment composes as a sweep, and the Table 2 layout from runs (means, seed sd, wins)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.reporting.table2 import PAPER, build_table2, table2, wins

REPO = Path(__file__).resolve().parents[2]


def test_experiment_composes_a_24_cell_sweep_with_the_report_callback():
    from hydra import compose, initialize_config_dir

    from curation.config_schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=table2_tiny"], return_hydra_config=True)
    assert cfg.pipeline == "table2" and cfg.hydra.mode.name == "MULTIRUN"
    params = cfg.hydra.sweeper.params
    assert params["table2.corpus"].split(",") == ["raw", "semdedup", "edu", "ultrafineweb", "dclm", "greedy_disf",
                                                  "datamask_paper", "datamask"]
    assert params["pretrain.train.seed"].split(",") == ["0", "1", "2"]
    assert set(cfg.table2.corpora) == {"raw", "semdedup", "edu", "ultrafineweb", "dclm", "greedy_disf",
                                         "datamask_paper", "datamask"}
    from curation.selection.config import DATAMASK_PAPER

    assert dict(cfg.table2.corpora.datamask_paper.config) == DATAMASK_PAPER  # FineWeb-Mask's recipe (Sec. 4.4)
    assert cfg.table2.corpora.datamask_paper.pool == "pruned"
    assert cfg.table2.corpora.edu.score == "edu" and cfg.table2.corpora.dclm.score == "fasttext_dclm"
    assert cfg.table2.corpora.datamask.pool == "pruned" and cfg.table2.corpora.raw.method == "random"
    assert cfg.hydra.callbacks.table2_report._target_.endswith("Table2ReportCallback")
    assert cfg.tracking.experiment_name == "table2_tiny" and cfg.report.experiment == "table2_tiny"


def _runs() -> pd.DataFrame:
    """2 corpora x 2 seeds; boolq (reading), piqa + siqa (reasoning), hellaswag (knowledge)."""
    acc = {  # (corpus, seed) -> primary metric per task
        ("raw", 0): {"boolq": 0.60, "piqa": 0.55, "siqa": 0.35, "hellaswag": 0.26},
        ("raw", 1): {"boolq": 0.62, "piqa": 0.57, "siqa": 0.33, "hellaswag": 0.28},
        ("edu", 0): {"boolq": 0.50, "piqa": 0.60, "siqa": 0.40, "hellaswag": 0.30},
        ("edu", 1): {"boolq": 0.52, "piqa": 0.62, "siqa": 0.42, "hellaswag": 0.26},
    }
    primary = {"boolq": "acc", "piqa": "acc_norm", "siqa": "acc", "hellaswag": "acc_norm"}
    chance = {"boolq": 0.5, "piqa": 0.5, "siqa": 1 / 3, "hellaswag": 0.25}
    rows = []
    for (corpus, seed), scores in acc.items():
        row = {"run_id": f"{corpus}{seed}", "params.table2.corpus": corpus, "params.pretrain.train.seed": str(seed),
               "params.eval.limit": "40", "metrics.train_tokens": 4096.0,
               "metrics.tokens_total": 8192.0 if corpus == "raw" else 16384.0}
        for task, value in scores.items():
            row[f"metrics.{task}_{primary[task]}"] = value
            row[f"metrics.{task}_chance"] = chance[task]
        rows.append(row)
    return pd.DataFrame(rows)


def test_table2_layout_means_seed_spread_delta_and_wins():
    table, per_task, notes = table2(_runs())
    assert list(table["corpus"]) == ["raw", "edu", "chance"]  # paper order, chance last
    raw, edu = table.iloc[0], table.iloc[1]
    assert raw["reading_comprehension"] == pytest.approx(61.0) and raw["reading_comprehension_sd"] == pytest.approx(
        np.std([60, 62], ddof=1))
    assert edu["reasoning"] == pytest.approx(np.mean([(60 + 40) / 2, (62 + 42) / 2]))
    # average = mean of the three ability averages, per seed, then over seeds
    edu_avg = np.mean([np.mean([50, 50, 30]), np.mean([52, 52, 26])])
    assert edu["average"] == pytest.approx(edu_avg)
    assert edu["delta_average"] == pytest.approx(edu_avg - raw["average"]) and raw["delta_average"] == 0
    assert (raw["win"], edu["win"]) == ("1/4", "3/4")  # raw wins boolq; edu piqa, siqa and hellaswag (28 vs 27)
    assert table.iloc[2]["reasoning"] == pytest.approx(100 * (0.5 + 1 / 3) / 2)
    assert set(per_task["task"]) == {"boolq", "piqa", "siqa", "hellaswag"}
    assert (raw["train_tokens"], raw["corpus_tokens"], edu["corpus_tokens"]) == (4096, 8192, 16384)
    assert any("noise" in n for n in notes) and any("edu vs raw" in n for n in notes)


def test_ties_count_as_a_win_for_each_tied_corpus():
    scores = pd.DataFrame({"task": ["t", "t", "u", "u"], "corpus": ["a", "b", "a", "b"], "value": [1.0, 1.0, 2, 3]})
    assert wins(scores).to_dict() == {"a": 1, "b": 2}


def test_report_carries_the_paper_rows_and_refuses_foreign_runs():
    report = build_table2(_runs(), {}, {})
    assert report.paper is PAPER and "FineWeb-Mask" in set(report.paper["corpus"])
    assert "table2_abilities" in report.figures and "2 seeds" in report.title
    with pytest.raises(ValueError, match="table2"):
        build_table2(_runs().drop(columns=["params.table2.corpus"]), {}, {})


def test_table2_report_makes_pairwise_decisions_on_continuous_metrics():
    runs = _runs()
    # edu's correct-answer probability per char beats raw's on both seeds by 0.020 +- 0.001.
    runs["metrics.mc_correct_prob_per_char"] = [0.100, 0.110, 0.121, 0.129]  # raw0, raw1, edu0, edu1
    report = build_table2(runs, {}, {})
    rows = report.decisions.set_index("metric")
    row = rows.loc["mc_correct_prob_per_char"]
    assert (row["corpus_a"], row["corpus_b"]) == ("raw", "edu") and row["paired"] and row["seeds"] == 2
    assert row["mean_diff"] == pytest.approx(-0.020) and row["se"] == pytest.approx(0.001)
    assert row["decided"] and row["winner"] == "edu"
    # average: raw (0.6, 0.62 boolq ...) vs edu: seed-paired differences decide or not by their own spread.
    assert "average" in rows.index and "boolq_acc%" in rows.index
    assert "table2_decisions" in report.figures
    assert any("edu beats raw on mc_correct_prob_per_char" in n for n in report.notes)
    # raw -> FineWeb 44.9, edu -> FineWeb-Edu 46.8 in the paper: edu > raw decided here agrees with it
    assert "Against the paper's order (mc_correct_prob_per_char): 1 of 1 pairs with a paper row decided, 1 as the " \
           "paper orders them, 0 the other way." in report.notes
    # 2 seeds: the paired t-test of (0.021, 0.019), t = 20 on 1 degree of freedom, p = 0.032; one pair per metric
    assert "edu beats raw on mc_correct_prob_per_char by 0.02 ± 0.001 (Holm p 0.032)" in report.notes
    rule = next(n for n in report.notes if n.startswith("Decisions ("))
    assert "Holm-corrected" in rule and "item sampling is not in the standard errors" in rule
