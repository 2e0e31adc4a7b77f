"""conf/verification/default.yaml equals VerificationConfig; bad keys fail; the Table 8 layout and its deltas.

The range checks are tested key by key: the value just outside each bound is refused with its exact message (the
message names the config key the user has to fix), and the value exactly at each bound is accepted. Every test
calls the function it checks itself (no module fixture), so a mutation tool charges each call to the test.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from curation.configuration import ConfigError
from curation.evaluation.tasks import TASKS
from curation.selection.corpus import CorpusSpec
from curation.verification.config import (
    BASE,
    BASELINE,
    DEFAULT_MIX,
    PoolSpec,
    SeedLoopConfig,
    VerificationConfig,
    format_table8,
    parse_seed_loop,
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


def _exactly(message: str) -> str:
    return "^" + re.escape(message) + "$"


def test_the_default_share_of_the_candidate_is_ultra_fineweb_s_30_percent():
    # seeds/002 Sec. 2.2 and App. A: annealing "allocating 30% of the" batches to the verification data, the
    # setting App. A's formula divides by (Total Token = tokens x n_epoch / 0.3) and Table 7 shows stable.
    assert VerificationConfig().ratios == [0.3]
    assert SeedLoopConfig().ratio == 0.3


# --- VerificationConfig.validate: each key just outside its bound, with the message the user reads ---

RESERVED = "the names 'default_mix', 'default_only' and 'base' are reserved"
IN_OPEN_UNIT = "each ratio must be in (0, 1)"
WARMUP = "must be in [0, 1) and leave room for the decay"
ANNEAL_LENGTH = "anneal_max_steps must be >= 1 and anneal_epochs > 0"


@pytest.mark.parametrize(("change", "key", "message"), [
    ({"candidates": {}}, "candidates", "name at least one candidate corpus"),
    ({"candidates": {DEFAULT_MIX: CorpusSpec()}}, "candidates", RESERVED),
    ({"candidates": {BASELINE: CorpusSpec()}}, "candidates", RESERVED),
    ({"candidates": {BASE: CorpusSpec()}}, "candidates", RESERVED),
    ({"ratios": []}, "ratios", IN_OPEN_UNIT),
    ({"ratios": [0.0]}, "ratios", IN_OPEN_UNIT),
    ({"ratios": [0.3, 1.0]}, "ratios", IN_OPEN_UNIT),  # every ratio is checked, not the first
    ({"base_tokens": 0}, "base_tokens", "must be >= 1"),
    ({"base_decay_fraction": -0.01}, "base_decay_fraction", "must be in [0, 1]"),
    # warmup 0: the decay check itself must refuse 1.01, not the warmup check after it
    ({"base_decay_fraction": 1.01, "base_warmup_fraction": 0.0}, "base_decay_fraction", "must be in [0, 1]"),
    ({"base_warmup_fraction": -0.01}, "base_warmup_fraction", WARMUP),
    ({"base_warmup_fraction": 1.0, "base_decay_fraction": 0.0}, "base_warmup_fraction", WARMUP),
    # each fraction in range, together 1.125 of the run: no room for the decay
    ({"base_warmup_fraction": 0.5, "base_decay_fraction": 0.625}, "base_warmup_fraction", WARMUP),
    ({"candidate_tokens": 0}, "candidate_tokens", "must be None or >= 1"),
    ({"anneal_lr_scale": 0.0}, "anneal_lr_scale", "must be > 0"),
    ({"anneal_min_lr_scale": 0.0}, "anneal_min_lr_scale", "must be in (0, 1]"),
    ({"anneal_min_lr_scale": 1.01}, "anneal_min_lr_scale", "must be in (0, 1]"),
    ({"anneal_steps": 0}, "anneal_steps", "must be None or >= 1"),
    ({"anneal_max_steps": 0}, "anneal_max_steps", ANNEAL_LENGTH),
    ({"anneal_epochs": 0.0}, "anneal_max_steps", ANNEAL_LENGTH),
    ({"anneal_warmup_fraction": -0.01}, "anneal_warmup_fraction", "must be in [0, 1)"),
    ({"anneal_warmup_fraction": 1.0}, "anneal_warmup_fraction", "must be in [0, 1)"),
    ({"limit": 0}, "limit", "must be None or >= 1"),
    # two unknown tasks: the message names the first one only
    ({"tasks": ["hellaswag", "race_mid", "race_low"]}, "tasks", f"unknown task ['race_mid']; known: {sorted(TASKS)}"),
    ({"seed_loop": SeedLoopConfig(z=-1.0)}, "seed_loop.z", "must be >= 0"),  # the loop's own checks run too
])
def test_verification_values_just_outside_a_bound_are_refused_naming_the_key(change, key, message):
    with pytest.raises(ValueError, match=_exactly(f"config key 'verification.{key}': {message}")):
        VerificationConfig(**change).validate()


@pytest.mark.parametrize("change", [
    {"ratios": [1e-9, 0.5, 1 - 1e-9]},
    {"base_tokens": 1},
    {"base_decay_fraction": 0.0},
    {"base_decay_fraction": 1.0, "base_warmup_fraction": 0.0},  # all decay
    {"base_warmup_fraction": 0.0},
    {"base_warmup_fraction": 0.5, "base_decay_fraction": 0.5},  # warmup then decay, no stable phase
    {"candidate_tokens": 1},
    {"candidate_tokens": None},
    {"anneal_lr_scale": 1e-9},
    {"anneal_min_lr_scale": 1.0},  # a constant annealing LR
    {"anneal_min_lr_scale": 1e-9},
    {"anneal_steps": 1},
    {"anneal_steps": None},
    {"anneal_max_steps": 1, "anneal_epochs": 0.5},  # half a pass over the candidate is a length too
    {"anneal_warmup_fraction": 0.0},
    {"limit": 1},
    {"limit": None},
    {"tasks": None},
    {"candidates": {"edu": CorpusSpec(method="topk_quality", score="edu")}},
])
def test_verification_values_at_a_bound_are_accepted(change):
    cfg = VerificationConfig(**change)
    assert cfg.validate() is cfg


def test_an_unknown_task_of_the_seed_loop_is_refused_under_its_own_key():
    with pytest.raises(ValueError, match=r"^config key 'verification\.seed_loop\.tasks': unknown task \['race_mid'\]"):
        VerificationConfig(seed_loop=SeedLoopConfig(tasks=["race_mid"])).validate()


# --- SeedLoopConfig.validate ---

SEEDS = "name at least 2 distinct seeds (the standard error needs them)"
ONE_POOL_SOURCE = "name exactly one of category and path"


@pytest.mark.parametrize(("change", "key", "message"), [
    ({"pools": {}}, "pools", "name at least one candidate seed pool"),
    ({"pools": {"mixed": PoolSpec()}}, "pools.mixed", ONE_POOL_SOURCE),
    ({"pools": {"mixed": PoolSpec(category="web", path="pool.jsonl")}}, "pools.mixed", ONE_POOL_SOURCE),
    ({"ratio": 0.0}, "ratio", "must be in (0, 1)"),
    ({"ratio": 1.0}, "ratio", "must be in (0, 1)"),
    ({"seeds": [0]}, "seeds", SEEDS),
    ({"seeds": [1, 1]}, "seeds", SEEDS),  # two runs with one seed: a standard error of 0
    ({"base_tokens": 0}, "base_tokens", "tokens must be >= 1"),
    ({"candidate_tokens": 0}, "base_tokens", "tokens must be >= 1"),
    ({"default_docs": 0}, "default_docs", "must be None or >= 1"),
    ({"limit": 0}, "limit", "must be None or >= 1"),
    ({"z": -0.5}, "z", "must be >= 0"),
    ({"if_none": "random"}, "if_none", "one of ('best', 'fail')"),
    ({"train_docs": 0}, "train_docs", "must be >= 1"),
    ({"rounds": 0}, "rounds", "1 or 2 (Table 3: a third round brought nothing)"),
    ({"rounds": 3}, "rounds", "1 or 2 (Table 3: a third round brought nothing)"),
    ({"bucket": 0}, "bucket", "bucket and epoch must be >= 1"),
    ({"epoch": 0}, "bucket", "bucket and epoch must be >= 1"),
])
def test_seed_loop_values_just_outside_a_bound_are_refused_naming_the_key(change, key, message):
    # the default prefix is where the loop sits in the config: verification.seed_loop
    with pytest.raises(ValueError, match=_exactly(f"config key 'verification.seed_loop.{key}': {message}")):
        SeedLoopConfig(**change).validate()


def test_a_seed_loop_error_carries_the_prefix_it_is_given():
    with pytest.raises(ValueError, match=_exactly("config key 'loop.z': must be >= 0")):
        SeedLoopConfig(z=-1.0).validate("loop")


@pytest.mark.parametrize("change", [
    {"pools": {"wiki": PoolSpec(path="wiki.jsonl")}},
    {"pools": {"web": PoolSpec(category="web")}},
    {"ratio": 1e-9},
    {"ratio": 1 - 1e-9},
    {"seeds": [0, 1]},
    {"base_tokens": 1, "candidate_tokens": 1},
    {"default_docs": 1},
    {"default_docs": None},
    {"limit": 1},
    {"limit": None},
    {"z": 0.0},  # any positive mean gain helps
    {"if_none": "best"},
    {"if_none": "fail"},
    {"train_docs": 1},
    {"rounds": 1},
    {"rounds": 2},
    {"bucket": 1, "epoch": 1},
])
def test_seed_loop_values_at_a_bound_are_accepted(change):
    cfg = SeedLoopConfig(**change)
    assert cfg.validate() is cfg


# --- parse_seed_loop ---


def test_parse_seed_loop_reads_a_mapping_over_the_defaults_and_validates_it():
    assert parse_seed_loop(None) == SeedLoopConfig()
    parsed = parse_seed_loop({"ratio": 0.1, "seeds": [3, 4], "pools": {"wiki": {"path": "wiki.jsonl"}}})
    assert parsed == SeedLoopConfig(ratio=0.1, seeds=[3, 4], pools={"wiki": PoolSpec(path="wiki.jsonl")})
    given = SeedLoopConfig(z=1.0)
    assert parse_seed_loop(given) is given
    with pytest.raises(ValueError, match=_exactly("config key 'verification.seed_loop.ratio': must be in (0, 1)")):
        parse_seed_loop({"ratio": 1.0})
    with pytest.raises(ValueError, match=_exactly("config key 'verification.seed_loop.z': must be >= 0")):
        parse_seed_loop(SeedLoopConfig(z=-1.0))


def test_parse_seed_loop_names_a_misspelt_key_by_its_full_path():
    known = sorted(f.name for f in dataclasses.fields(SeedLoopConfig))
    with pytest.raises(ConfigError, match=_exactly(f"verification.seed_loop.ratios: unknown key; known: {known}")):
        parse_seed_loop({"ratios": [0.3]})


def test_a_pool_names_exactly_one_source():
    assert PoolSpec(category="web").validate("k") == PoolSpec(category="web")
    for spec in (PoolSpec(), PoolSpec(category="web", path="pool.jsonl")):
        with pytest.raises(ValueError, match=_exactly(f"config key 'k': {ONE_POOL_SOURCE}")):
            spec.validate("k")


# --- verification_table and format_table8 on a hand-made results frame ---


def _hand_results() -> pd.DataFrame:
    # Accuracies that are exact binary fractions, so the percents and deltas below are exact. Tasks are listed
    # piqa before mmlu (not alphabetical) and the candidate "dclm" sorts before "default_only" by run name, so
    # neither the column order nor the row order can come from sorting names. Ratio 0.3 comes before 0.1.
    values = [  # run, dataset, ratio, piqa, mmlu
        ("base", BASE, np.nan, 0.5, 0.25),
        ("dclm_r0.30", "dclm", 0.3, 0.875, 0.375),
        ("default_only_r0.30", BASELINE, 0.3, 0.75, 0.25),
        ("dclm_r0.10", "dclm", 0.1, 0.625, 0.25),
        ("default_only_r0.10", BASELINE, 0.1, 0.5, 0.375),
    ]
    rows = []
    for run, dataset, ratio, piqa, mmlu in values:
        for task, value in (("piqa", piqa), ("mmlu", mmlu)):
            rows.append({"run": run, "dataset": dataset, "ratio": ratio, "task": task, "metric": "acc",
                         "value": value})
    return pd.DataFrame(rows)


def _hand_table() -> pd.DataFrame:
    # Worked out by hand: percent = 100 x accuracy, average = mean of the two tasks, delta = row - the
    # default_only row at the same ratio (0 for that row, NaN for the base model, which has no ratio).
    nan = np.nan
    return pd.DataFrame({
        "ratio": [nan, 0.1, 0.1, 0.3, 0.3],
        "dataset": [BASE, BASELINE, "dclm", BASELINE, "dclm"],
        "piqa": [50.0, 50.0, 62.5, 75.0, 87.5],
        "mmlu": [25.0, 37.5, 25.0, 25.0, 37.5],
        "average": [37.5, 43.75, 43.75, 50.0, 62.5],
        "delta_piqa": [nan, 0.0, 12.5, 0.0, 12.5],
        "delta_mmlu": [nan, 0.0, -12.5, 0.0, 12.5],
        "delta_average": [nan, 0.0, 0.0, 0.0, 12.5],
    })


def test_verification_table_of_a_hand_made_frame():
    # base first, then per ratio (ascending) the default_only run before the candidates; tasks in first-seen order
    pd.testing.assert_frame_equal(verification_table(_hand_results()), _hand_table())


def test_format_table8_of_a_hand_made_table():
    # The base model has no ratio ("-"); base and default_only show no delta; a candidate's zero delta shows.
    assert format_table8(_hand_table()) == "\n".join([
        "| Ratio | Dataset | piqa | mmlu | average |",
        "|---|---|---|---|---|",
        "| - | base | 50.00 | 25.00 | 37.50 |",
        "| 10% | default_only | 50.00 | 37.50 | 43.75 |",
        "| 10% | dclm | 62.50 (+12.50) | 25.00 (-12.50) | 43.75 (+0.00) |",
        "| 30% | default_only | 75.00 | 25.00 | 50.00 |",
        "| 30% | dclm | 87.50 (+12.50) | 37.50 (+12.50) | 62.50 (+12.50) |",
    ])
