"""Evaluate a model on the zero-shot tasks and average them per ability (DATAMASK Table 2 layout).

``evaluate(model, tokenizer, config)`` loads each configured task (subsampled),
scores it, and returns an :class:`EvalReport`: per-task metrics, the three
ability averages and their mean over the available tasks, and the tasks that
could not be evaluated with the reason (RACE and KQAPro are not shipped offline).
Metric names follow ``<task>_<metric>`` (``hellaswag_acc_norm``) so a caller can
log ``report.metrics()`` to MLflow as they are.

Note on Table 2: the paper's "Average" is the mean of the three ability
averages' 12 tasks; here ``average`` is the mean of the ability averages over
the abilities that have at least one evaluated task.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np
import torch
from tokenizers import Tokenizer

from curation.evaluation.config import EvalConfig, parse_eval_config
from curation.evaluation.scoring import (
    CONTINUOUS_METRICS,
    LMScorer,
    gold_text_loss,
    score_choices_and_gold_text,
    score_generation,
    score_multiple_choice,
)
from curation.evaluation.tasks import ABILITIES, Task, TaskUnavailable, load_task
from curation.lm.model import CausalLM


@dataclass
class TaskResult:
    name: str
    ability: str
    in_paper: bool
    primary_metric: str  # the metric averaged into the ability score
    metrics: dict[str, float]  # acc / acc_norm / exact_match, the continuous metrics, item SEs, chance
    n_items: int  # items scored
    n_total: int  # items in the shipped split
    seconds: float
    # per-item values of ITEM_METRICS (item order = the seeded subsample's): what an item-sampling error
    # of a difference between two models on the same items is computed from (curation.evaluation.items)
    items: dict[str, list[float]] = field(default_factory=dict)

    @property
    def primary(self) -> float:
        return self.metrics[self.primary_metric]


@dataclass
class EvalReport:
    tasks: dict[str, TaskResult] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)  # task -> reason
    abilities: dict[str, float] = field(default_factory=dict)  # ability -> mean primary metric
    average: float = float("nan")  # mean of the ability averages

    def metrics(self) -> dict[str, float]:
        """Flat {"<task>_<metric>": value, "<ability>": value, "average": value} (fractions in [0, 1])."""
        flat: dict[str, float] = {}
        for result in self.tasks.values():
            for metric, value in result.metrics.items():
                flat[f"{result.name}_{metric}"] = value
        flat.update(self.abilities)
        flat["average"] = self.average
        # The continuous metrics averaged over the multiple-choice tasks (``mc_<metric>``): the rows that
        # DataDecide finds rank corpora at small scale where accuracy cannot.
        mc = [r for r in self.tasks.values() if "correct_prob" in r.metrics]
        for metric in CONTINUOUS_METRICS:
            if mc:
                flat[f"mc_{metric}"] = float(np.mean([r.metrics[metric] for r in mc]))
        ref = [r for r in self.tasks.values() if "ref_bits_per_byte" in r.metrics]
        for metric in ("ref_nats_per_token", "ref_bits_per_byte"):  # the reference set: every task's gold text
            if ref:
                flat[metric] = float(np.mean([r.metrics[metric] for r in ref]))
        return flat

    def item_values(self) -> dict[str, dict[str, list[float]]]:
        """task -> metric -> per-item values (:attr:`TaskResult.items`)."""
        return {name: r.items for name, r in self.tasks.items() if r.items}

    def rows(self) -> list[dict[str, Any]]:
        """One row per configured task (evaluated or not), for a table."""
        rows = [
            {"task": r.name, "ability": r.ability, "in_paper": r.in_paper, "metric": r.primary_metric,
             "value": r.primary, "chance": r.metrics.get("chance"), "n_items": r.n_items, "n_total": r.n_total,
             "available": True, "note": ""}
            for r in self.tasks.values()
        ]
        rows += [{"task": t, "available": False, "note": why} for t, why in self.unavailable.items()]
        return rows


def evaluate_task(scorer: LMScorer, task: Task, max_new_tokens: int = 16, reference_loss: bool = True) -> TaskResult:
    t0 = time.perf_counter()
    items: dict[str, list[float]] = {}
    ref_rows: list[dict[str, float]] = []
    ref_metrics: Optional[dict[str, float]] = None
    if task.spec.kind == "multiple_choice":
        rows: list[dict[str, float]] = []
        if reference_loss and scorer.packed:  # choices and gold text in one pass: the gold text is a choice's input
            metrics, ref_metrics = score_choices_and_gold_text(scorer, task.items, per_item=rows, ref_per_item=ref_rows)
        else:
            metrics = score_multiple_choice(scorer, task.items, per_item=rows)
        for key in SE_METRICS:  # standard error of the mean over items (sample sd / sqrt(n))
            values = np.array([r[key] for r in rows], dtype=float)
            metrics[f"{key}_se"] = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")
        items.update({key: [float(r[key]) for r in rows] for key in ITEM_METRICS if rows and key in rows[0]})
    else:
        metrics = score_generation(scorer, task.items, max_new_tokens)
    if reference_loss:
        if ref_metrics is None:
            ref_metrics = gold_text_loss(scorer, task.items, per_item=ref_rows)
        metrics.update(ref_metrics)
        items.update({key: [r[key] for r in ref_rows] for key in ("ref_bits", "ref_bytes")})
    return TaskResult(
        name=task.name,
        ability=task.spec.ability,
        in_paper=task.spec.in_paper,
        primary_metric=task.spec.primary_metric,
        metrics=metrics,
        n_items=len(task.items),
        n_total=task.n_total,
        seconds=time.perf_counter() - t0,
        items=items,
    )


# Metrics whose item-level standard error is reported beside them (``<task>_<metric>_se``).
SE_METRICS = ("acc", "acc_norm", "correct_prob_per_char", "norm_correct_prob_per_char", "margin_per_char",
              "correct_logprob_per_char")
# Metrics whose per-item values the report keeps (TaskResult.items), with ref_bits / ref_bytes.
ITEM_METRICS = SE_METRICS


def summarize(results: dict[str, TaskResult]) -> tuple[dict[str, float], float]:
    """Ability averages of the primary metrics, and their mean (abilities without tasks are left out)."""
    abilities = {}
    for ability in ABILITIES:
        values = [r.primary for r in results.values() if r.ability == ability]
        if values:
            abilities[ability] = sum(values) / len(values)
    average = sum(abilities.values()) / len(abilities) if abilities else float("nan")
    return abilities, average


def evaluate(
    model: CausalLM,
    tokenizer: Tokenizer,
    config: EvalConfig | Mapping[str, Any] | None = None,
    on_task: Optional[Callable[[TaskResult], None]] = None,
    packed: bool = True,
) -> EvalReport:
    """Zero-shot evaluation of ``model`` on ``config.tasks``; ``on_task(result)`` after each task.

    packed: each item's choices (and gold text) share one forward pass (:class:`LMScorer`); False is the
    per-request path, the same numbers to float rounding (benchmarks/lm/bench_eval_cost.py compares them).
    """
    cfg = parse_eval_config(config)
    torch.set_num_threads(cfg.num_threads)
    scorer = LMScorer(model, tokenizer, batch_size=cfg.batch_size, prepend_eos=cfg.prepend_eos, packed=packed)
    report = EvalReport()
    for name in cfg.tasks:
        try:
            task = load_task(name, limit=cfg.limit_for(name), seed=cfg.seed, data_dir=cfg.data_dir,
                             exclude_seed=cfg.exclude_seed)
        except TaskUnavailable as exc:
            report.unavailable[name] = str(exc)
            continue
        result = evaluate_task(scorer, task, cfg.max_new_tokens, cfg.reference_loss)
        report.tasks[name] = result
        if on_task is not None:
            on_task(result)
    report.abilities, report.average = summarize(report.tasks)
    return report
