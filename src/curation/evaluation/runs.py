"""Evaluation runs cached by content: zero-shot tasks on a checkpoint (DATAMASK seeds/000 Sec. 4.1, App. A.3).

Metrics are named after the task (``hellaswag_acc_norm``, ``triviaqa_exact_match``),
plus the three ability averages (``reading_comprehension``, ``reasoning``,
``knowledge``) and ``average``, so MLflow lines runs up by task. The report is
cached (:mod:`curation.cache`) by the checkpoint's weights and tokenizer and
the eval config; the pretrain, verification and Table 2 paths share it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any, Mapping, Optional

import pandas as pd

from curation.cache import atomic_write_text, cache_dir, config_key, model_digest, text_digest
from curation.evaluation.config import EvalConfig, parse_eval_config
from curation.evaluation.evaluate import EvalReport, evaluate
from curation.lm.checkpoint import LMCheckpoint

log = logging.getLogger(__name__)


def eval_key(checkpoint: LMCheckpoint, config: EvalConfig) -> str:
    settings = dataclasses.asdict(config)
    for key in ("num_threads", "batch_size"):  # speed only
        settings.pop(key)
    if settings.get("exclude_seed") is None:  # unset: the key of every evaluation cached before it existed
        settings.pop("exclude_seed", None)
    return config_key("eval-v2", model_digest(checkpoint.model), text_digest(checkpoint.tokenizer.to_str()), settings)


def run_evaluation(checkpoint: LMCheckpoint, eval_config: Any, cache: Mapping[str, Any],
                   items_out: Optional[dict] = None) -> tuple[dict[str, float], pd.DataFrame]:
    """Evaluate (or load the cached report of) ``checkpoint``: flat metrics (``<task>_<metric>``, ability
    averages, ``average``, ``eval_cache_hit`` ...) and one row per task (task, ability, metric, value,
    chance, items; unavailable tasks with the reason). ``items_out``, when given, receives the per-item
    values (task -> metric -> list; :attr:`curation.evaluation.evaluate.TaskResult.items`)."""
    cfg = parse_eval_config(eval_config)
    directory = cache_dir(cache)
    path = directory / f"eval-{eval_key(checkpoint, cfg)}.json" if directory else None
    if path is not None and path.is_file():
        stored = json.loads(path.read_text())
        log.info("cache hit: %s", path)
        if items_out is not None:
            items_out.update(stored.get("items", {}))
        return {**stored["metrics"], "eval_cache_hit": 1.0}, pd.DataFrame(stored["rows"])
    started = time.perf_counter()
    report: EvalReport = evaluate(
        checkpoint.model, checkpoint.tokenizer, cfg,
        on_task=lambda r: log.info("%s: %s=%.3f on %d items (%.1fs)", r.name, r.primary_metric, r.primary,
                                   r.n_items, r.seconds),
    )
    metrics = {**report.metrics(), "eval_seconds": time.perf_counter() - started,
               "eval_tasks": float(len(report.tasks)), "eval_tasks_unavailable": float(len(report.unavailable))}
    rows = report.rows()
    if items_out is not None:
        items_out.update(report.item_values())
    if path is not None:
        # v2: with the per-item values (items_out; curation.evaluation.items computes item errors from them)
        atomic_write_text(path, json.dumps({"metrics": metrics, "rows": rows, "items": report.item_values()}))
    return {**metrics, "eval_cache_hit": 0.0}, pd.DataFrame(rows)

