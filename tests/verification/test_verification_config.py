"""conf/verification/default.yaml equals VerificationConfig; bad keys fail; the Table 8 layout and its deltas."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from curation.verification.config import (
    BASE,
    BASELINE,
    VerificationConfig,
    format_table8,
    parse_verification_config,
    verification_table,
)

REPO = Path(__file__).resolve().parents[2]


def test_yaml_mirrors_the_dataclass():
    data = yaml.safe_load((REPO / "conf" / "verification" / "default.yaml").read_text())
    assert data.pop("defaults")[0] == "_schema"  # the Hydra schema entry, not a knob
    assert data == dataclasses.asdict(VerificationConfig())
    assert parse_verification_config(data) == VerificationConfig()


def test_hydra_composes_the_group_and_refuses_a_misspelt_key():
    from hydra.errors import ConfigCompositionException

    from curation.config_loader import compose_config

    cfg = compose_config(REPO / "conf", ["verification.ratios=[0.05,0.5]",
                                         "+verification.candidates.edu={method:topk_quality,score:edu}"])
    parsed = parse_verification_config(cfg["verification"])
    assert parsed.ratios == [0.05, 0.5] and parsed.candidates["edu"].score == "edu"
    assert parsed.candidates["edu"].pool == "raw"  # missing keys take the defaults
    with pytest.raises(ConfigCompositionException):
        compose_config(REPO / "conf", ["verification.ratio=0.3"])


@pytest.mark.parametrize(("change", "key"), [
    ({"ratios": [0.0]}, "verification.ratios"),
    ({"ratios": [1.5]}, "verification.ratios"),
    ({"candidates": {"default_mix": {"method": "random"}}}, "verification.candidates"),
    ({"candidates": {"x": {"method": "random", "pool": "pruned_away"}}}, "verification.candidates.x.pool"),
    ({"tasks": ["hellaswag", "race_mid"]}, "verification.tasks"),
    ({"anneal_steps": "many"}, "verification.anneal_steps"),
    ({"base_token": 10}, "verification.base_token"),
])
def test_bad_values_name_the_key(change, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        parse_verification_config({**dataclasses.asdict(VerificationConfig()), **change})


def _results() -> pd.DataFrame:
    rows = []
    values = {  # run -> (dataset, ratio, {task: accuracy})
        "base": (BASE, np.nan, {"mmlu": 0.25, "piqa": 0.55}),
        "default_only_r0.30": (BASELINE, 0.3, {"mmlu": 0.26, "piqa": 0.56}),
        "raw_r0.30": ("raw", 0.3, {"mmlu": 0.25, "piqa": 0.58}),
        "selection_r0.30": ("selection", 0.3, {"mmlu": 0.30, "piqa": 0.55}),
        "default_only_r0.10": (BASELINE, 0.1, {"mmlu": 0.20, "piqa": 0.50}),
        "selection_r0.10": ("selection", 0.1, {"mmlu": 0.21, "piqa": 0.52}),
    }
    for run, (dataset, ratio, scores) in values.items():
        for task, value in scores.items():
            rows.append({"run": run, "dataset": dataset, "ratio": ratio, "task": task, "metric": "acc",
                         "value": value})
    return pd.DataFrame(rows)


def test_table8_rows_and_deltas_against_the_default_only_run_at_the_same_ratio():
    table = verification_table(_results())
    assert list(zip(table["dataset"], table["ratio"].fillna(-1))) == [
        (BASE, -1), (BASELINE, 0.1), ("selection", 0.1), (BASELINE, 0.3), ("raw", 0.3), ("selection", 0.3)]
    sel = table[(table["dataset"] == "selection") & (table["ratio"] == 0.3)].iloc[0]
    assert sel["mmlu"] == pytest.approx(30.0) and sel["delta_mmlu"] == pytest.approx(4.0)
    assert sel["average"] == pytest.approx(42.5) and sel["delta_average"] == pytest.approx(1.5)
    low = table[(table["dataset"] == "selection") & (table["ratio"] == 0.1)].iloc[0]
    assert low["delta_piqa"] == pytest.approx(2.0)  # vs the 10% baseline, not the 30% one
    assert table.loc[table["dataset"] == BASELINE, "delta_average"].eq(0).all()
    assert table.loc[table["dataset"] == BASE, "delta_average"].isna().all()
    text = format_table8(table)
    assert "| 30% | selection | 30.00 (+4.00) | 55.00 (-1.00) | 42.50 (+1.50) |" in text


def test_a_candidate_without_its_baseline_is_an_error():
    results = _results()
    with pytest.raises(ValueError, match="default_only"):
        verification_table(results[results["run"] != "default_only_r0.10"])
