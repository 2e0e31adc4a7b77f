"""At the default verification config, verification is verification (Ultra-FineWeb Sec. 2.2, App. A, issue #26).

The annealing peak is at most the base run's peak (0.1x, as App. A's 1e-3 is to App. B's 1e-2), annealing uses at
most 5% of the base run's tokens (paper: 10B of 1.1T = 0.9%), the base run warms up, and App. A's steps formula,
not the cap, sets the annealing length. The LR of the built schedules is read back step by step.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from curation.lm import get_config
from curation.lm.train import lr_at
from curation.verification import VerificationConfig, parse_verification_config, schedule_summary
from curation.verification.anneal import anneal_config, base_config

REPO = Path(__file__).resolve().parents[2]


def _defaults():
    defaults = yaml.safe_load((REPO / "conf/config.yaml").read_text())["defaults"]
    pretrain = get_config(next(d["pretrain"] for d in defaults if isinstance(d, dict) and "pretrain" in d))
    data = yaml.safe_load((REPO / "conf/verification/default.yaml").read_text())
    data.pop("defaults")
    return pretrain, parse_verification_config(data)


def test_default_config_anneals_below_the_base_peak_on_at_most_5_percent_of_its_tokens():
    pretrain, cfg = _defaults()
    assert pretrain.name == "tiny" and cfg == VerificationConfig()
    summary = schedule_summary(pretrain, cfg)
    assert summary["anneal_peak_lr"] <= summary["base_peak_lr"]
    assert summary["anneal_peak_lr"] == pytest.approx(0.1 * summary["base_peak_lr"])
    for ratio in cfg.ratios:
        label = f"r{ratio:.2f}"
        assert summary[f"anneal_share_of_base_{label}"] <= 0.05
        assert summary[f"anneal_formula_governs_{label}"] == 1.0  # App. A's formula, not the cap
    assert summary["anneal_steps_r0.30"] == 10 and summary["base_steps"] == 256


def test_the_built_schedules_have_those_learning_rates():
    pretrain, cfg = _defaults()
    base = base_config(pretrain, cfg).train
    steps = int(schedule_summary(pretrain, cfg)["base_steps"])
    base_lrs = [lr_at(s, base, steps) for s in range(steps)]
    assert base.warmup_steps == round(0.04 * steps) > 0 and base_lrs[0] < base_lrs[base.warmup_steps]
    assert max(base_lrs) == pytest.approx(pretrain.train.lr)
    assert base_lrs[-1] == pytest.approx(pretrain.train.min_lr)  # WSD decay ends at the floor
    n = int(schedule_summary(pretrain, cfg)["anneal_steps_r0.30"])
    anneal = anneal_config(pretrain, cfg, n).train
    anneal_lrs = [lr_at(s, anneal, n) for s in range(n)]
    assert max(anneal_lrs) == pytest.approx(0.1 * max(base_lrs))
    assert anneal_lrs[-1] == pytest.approx(0.05 * max(anneal_lrs))
    # App. A's 10% warmup is round(0.1 * 10) = 1 step at the defaults: the first step already runs at the peak
    assert anneal.warmup_steps == round(0.1 * n) == 1 and anneal_lrs[0] == max(anneal_lrs)
    assert all(a > b for a, b in zip(anneal_lrs, anneal_lrs[1:]))  # then exponential decay


def test_the_formula_governs_until_the_documented_cap():
    pretrain, cfg = _defaults()
    assert schedule_summary(pretrain, cfg, 26_214)["anneal_formula_governs_r0.30"] == 1.0
    capped = schedule_summary(pretrain, cfg, 26_215)
    assert capped["anneal_formula_governs_r0.30"] == 0.0 and capped["anneal_steps_r0.30"] == cfg.anneal_max_steps
    # anneal_epochs changes the length at the defaults (it had no effect under the old 48-step cap)
    more = schedule_summary(pretrain, VerificationConfig(anneal_epochs=5.0), None)
    assert more["anneal_steps_r0.30"] > schedule_summary(pretrain, cfg)["anneal_steps_r0.30"]


def test_schedule_summary_by_hand():
    # 32 tokens x 4 sequences x 2 accumulated = 256 tokens a step; base 12,800 tokens = 50 steps, warmup
    # round(0.04 x 50) = 2; App. A: 512 candidate tokens x 3 epochs / r / 256 = 24 steps at r = 0.25 (capped at 20),
    # 12 at r = 0.5 (the formula governs); peaks 0.1 x 1e-3, floor 0.05 of that
    pretrain = get_config("tiny")
    pretrain.train = dataclasses.replace(pretrain.train, seq_len=32, batch_size=4, accumulate_grad_batches=2,
                                         lr=1e-3, min_lr=1e-4)
    cfg = VerificationConfig(base_tokens=12_800, ratios=[0.25, 0.5], candidate_tokens=512, anneal_epochs=3.0,
                             anneal_max_steps=20)
    assert schedule_summary(pretrain, cfg) == pytest.approx({
        "base_peak_lr": 1e-3, "base_final_lr": 1e-4, "base_steps": 50.0, "base_tokens": 12_800.0,
        "base_warmup_steps": 2.0, "anneal_peak_lr": 1e-4, "anneal_final_lr": 5e-6,
        "anneal_steps_r0.25": 20.0, "anneal_tokens_r0.25": 5_120.0, "anneal_share_of_base_r0.25": 0.4,
        "anneal_formula_governs_r0.25": 0.0,
        "anneal_steps_r0.50": 12.0, "anneal_tokens_r0.50": 3_072.0, "anneal_share_of_base_r0.50": 0.24,
        "anneal_formula_governs_r0.50": 1.0})
    # a fixed length overrides the formula (which then does not govern); a candidate size given here wins
    fixed = schedule_summary(pretrain, dataclasses.replace(cfg, anneal_steps=7), 64)
    assert (fixed["anneal_steps_r0.50"], fixed["anneal_formula_governs_r0.50"]) == (7.0, 0.0)
    assert schedule_summary(pretrain, cfg, 64)["anneal_steps_r0.50"] == 2.0  # 64 x 3 / 0.5 / 256 = 1.5 -> 2
    # the formula is not capped at the paper's 5,000 steps before anneal_max_steps is applied
    long = schedule_summary(pretrain, dataclasses.replace(cfg, ratios=[0.5], anneal_max_steps=10_000), 256_000)
    assert (long["anneal_steps_r0.50"], long["anneal_formula_governs_r0.50"]) == (6_000.0, 1.0)
    with pytest.raises(ValueError, match="^name candidate_tokens: the config keeps candidates whole$"):
        schedule_summary(pretrain, dataclasses.replace(cfg, candidate_tokens=None))


# --- a base model the corpus cannot feed is refused before it trains (issue #44) -------------------------------


def test_a_base_budget_above_one_pass_over_the_default_mix_is_one_line_with_the_fit():
    from curation.errors import UserError, user_message
    from curation.verification.anneal import BaseTooLargeError, check_base_fits

    check_base_fits(mix_tokens=1_048_576, base_tokens=1_048_576, tokens_per_step=4096)  # one pass: fine
    with pytest.raises(BaseTooLargeError, match=r"^verification\.base_tokens=1048576: the base model would train "
                       r"51\.2 passes over the default mix's 20,480 LM tokens \(at most 1\)\. Fix: ingest more "
                       r"documents \(data\.max_docs, data\.path\) or set verification\.base_tokens <= 20480 "
                       r"\(5 steps of 4,096 tokens\)\.$") as err:
        check_base_fits(mix_tokens=20_480, base_tokens=1_048_576, tokens_per_step=4096)
    assert isinstance(err.value, UserError) and "\n" not in user_message(err.value)
    with pytest.raises(BaseTooLargeError, match=r"too few for one step, so a larger corpus is the fix\.$"):
        check_base_fits(mix_tokens=1000, base_tokens=4096, tokens_per_step=4096)
