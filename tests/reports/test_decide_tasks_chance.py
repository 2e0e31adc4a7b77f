"""The tasks the multiple-choice metrics average (``decide.min_tasks_above_chance``).

On the held-out web ladder (benchmarks/results/decide_ladder8_web/) one task of ten crossed chance at the top scale
and the ten-task headline became that task's alone. Now the ``mc_*`` metrics average only the tasks above chance
when at least ``min_tasks_above_chance`` (default 3) are; fewer: every task, and the recommendation says so in one
sentence. 0 or 1 keeps the earlier rule. The seed rounds' state, the decisions and the text read the one function.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from curation.configuration import ConfigError
from curation.decide.rounds import state
from curation.reporting.decide import MIN_TASKS_ABOVE_CHANCE, DecideConfig, build_report, tasks_above_chance

METRIC = "mc_correct_prob_per_char"
KEY = "correct_prob_per_char"
SCALE = "tiny@262144"
TASKS = [f"t{i}" for i in range(10)]  # not in curation.evaluation.tasks.TASKS: their primary metric is acc
CHANCE = dict.fromkeys(TASKS, 0.25)
N = 100


def _world(above: int, seeds: int = 3):
    """3 candidates x ``seeds`` cells over 10 tasks of 100 items: the first ``above`` tasks well above chance in
    accuracy (0.6 against 0.25), the others exactly at it. On correct-prob ``b`` leads on the tasks above chance
    and ``a`` on the others, so restricting the average changes the means and the ranking."""
    rng = np.random.default_rng(0)
    lift = {"a": (0.0, 0.03), "b": (0.03, 0.0), "c": (0.0, 0.0)}  # (on the tasks above chance, on the others)
    base = {t: rng.uniform(0.1, 0.3, N) for t in TASKS}
    cells, items = [], {}
    for c, (up, rest) in lift.items():
        for s in range(seeds):
            per = {}
            for i, t in enumerate(TASKS):
                hits = int(0.6 * N) if i < above else N // 4
                per[t] = {"acc": [1.0] * hits + [0.0] * (N - hits),
                          KEY: list(base[t] + (up if i < above else rest) + rng.normal(0, 0.002, N))}
            items[(SCALE, c, s)] = per
            cells.append({"scale": SCALE, "size": "tiny", "rung_tokens": 262144, "candidate": c, "seed": s,
                          METRIC: float(np.mean([np.mean(per[t][KEY]) for t in TASKS])), "parameters": 3e6,
                          "train_tokens": 262144, "budget_tokens": 1e6, "corpus_digest": c})
    return pd.DataFrame(cells), items


def _cfg(**kw) -> DecideConfig:
    return DecideConfig(candidates={"a": {}, "b": {}, "c": {}}, reference="c", **kw)


def _headline_means(report) -> dict[str, float]:
    rows = report.table[report.table["metric"] == METRIC]
    means = {**dict(zip(rows["corpus_a"], rows["mean_a"])), **dict(zip(rows["corpus_b"], rows["mean_b"]))}
    return {k: float(v) for k, v in means.items()}


def _check_rounds_agree(report, cells, items, cfg) -> None:
    """The seed rounds' state reads the same rule: its means on the headline are the report's."""
    means, _, _, headline, _ = state(cells, items, cfg, CHANCE)
    assert headline == METRIC
    assert means == pytest.approx(_headline_means(report), rel=1e-12)


def test_one_task_above_chance_of_ten_averages_every_task_and_says_so():
    cells, items = _world(above=1)
    rule = tasks_above_chance(items, SCALE, CHANCE)
    assert rule.above == ["t0"] and rule.minimum == MIN_TASKS_ABOVE_CHANCE == 3
    assert rule.headline_tasks is None and rule.restrict is None and rule.minimum_unmet
    assert rule.tasks["in_mc_average"].all()

    cfg = _cfg()
    report = build_report(cells, items, cfg, N, chance=CHANCE)
    assert ("1 of 10 tasks is above chance in accuracy at tiny@262144, fewer than decide.min_tasks_above_chance = "
            "3, so the minimum is not met and the multiple-choice metrics (the headline `mc_correct_prob_per_char` "
            "among them) average all 10 tasks.") in report.text
    assert "average the tasks above chance" not in report.text
    # the headline is the ten-task average the cells recorded: a leads (its lift is on nine tasks)
    means = _headline_means(report)
    assert means == pytest.approx(cells.groupby("candidate")[METRIC].mean().to_dict(), rel=1e-12)
    assert max(means, key=means.get) == "a"
    assert report.metrics["decide_tasks_above_chance"] == 1 and report.metrics["decide_mc_tasks"] == 10
    _check_rounds_agree(report, cells, items, cfg)


def test_three_tasks_above_chance_restrict_the_average_to_them():
    cells, items = _world(above=3)
    cfg = _cfg()
    rule = tasks_above_chance(items, SCALE, CHANCE, cfg.min_tasks_above_chance)
    assert rule.headline_tasks == ["t0", "t1", "t2"] and not rule.minimum_unmet and rule.note(SCALE, METRIC) == ""
    assert rule.restrict[METRIC] == ["t0", "t1", "t2"] and "ref_bits_per_byte" not in rule.restrict
    assert rule.tasks.set_index("task")["in_mc_average"].to_dict() == {t: t in ("t0", "t1", "t2") for t in TASKS}

    report = build_report(cells, items, cfg, N, chance=CHANCE)
    assert "average the tasks above chance: t0, t1, t2." in report.text
    assert "minimum is not met" not in report.text
    means = _headline_means(report)
    assert max(means, key=means.get) == "b"  # b's lift is on the three tasks kept
    assert report.metrics["decide_tasks_above_chance"] == 3 and report.metrics["decide_mc_tasks"] == 3
    _check_rounds_agree(report, cells, items, cfg)


def test_the_knob_at_one_keeps_the_earlier_rule():
    cells, items = _world(above=1)
    for minimum in (0, 1):
        rule = tasks_above_chance(items, SCALE, CHANCE, minimum)
        assert rule.headline_tasks == ["t0"] and not rule.minimum_unmet
    cfg = _cfg(min_tasks_above_chance=1)
    report = build_report(cells, items, cfg, N, chance=CHANCE)
    assert "average the tasks above chance: t0." in report.text and "minimum is not met" not in report.text
    means = _headline_means(report)
    assert max(means, key=means.get) == "b"  # t0 alone: b's lift
    _check_rounds_agree(report, cells, items, cfg)


def test_no_task_or_every_task_above_chance_averages_every_task_without_the_note():
    for above, said in ((0, "The multiple-choice metrics average every task"), (10, None)):
        cells, items = _world(above=above)
        rule = tasks_above_chance(items, SCALE, CHANCE)
        assert rule.headline_tasks is None and not rule.minimum_unmet and rule.note(SCALE) == ""
        text = build_report(cells, items, _cfg(), N, chance=CHANCE).text
        assert "minimum is not met" not in text and "average the tasks above chance" not in text
        if said:
            assert said in text


def test_the_knob_is_checked_and_the_yaml_default_is_the_dataclass_default():
    with pytest.raises(ConfigError, match="min_tasks_above_chance"):
        _cfg(min_tasks_above_chance=-1)
    with pytest.raises(ConfigError, match="min_tasks_above_chance"):
        _cfg(min_tasks_above_chance=2.5)
    base = yaml.safe_load((Path(__file__).parents[2] / "conf/experiment/_decide_base.yaml").read_text())
    assert base["decide"]["min_tasks_above_chance"] == DecideConfig.min_tasks_above_chance == 3
